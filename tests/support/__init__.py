"""What tests share and no test tests: helpers, in one place.

- `ports`: a free TCP port on 127.0.0.1.
- `environment`: set environment variables for a while and put back what was there.
- `simulated_job`: a SageMaker job of real `sm-launch` processes, one `/opt/ml` tree each, laid
  out from a resourceconfig layout (`smlaunch.launcher.sagemaker.simulate.SimulatedHosts`, which
  `sm-launch simulate` and `bench/bringup.py` use, starts the processes).
- `sagemaker_job`: the fake 3-host SageMaker job of the multi-host tests on it.
- `sm_hosts`: a SageMaker host's tree and environment for the toolkit and SDK entry tests.
- `terminal`: run a command in a pseudo-terminal and read its screen.
- `constructed_runs`: a report built from chosen rates, for the advisor, render and client tests.
- `user_layouts`: the digits written as users' tools write them (image folders, WebDataset,
  Parquet, slim TFRecords, manifests).
- `hostile`: what an attacker who can write one file plants (a checkpoint that runs a command).

- `s3`: the local S3 server's fixtures (registered for every folder by tests/conftest.py) and
  `aws_environment`, which points a client at it with throwaway credentials.

Imported as `support.<module>` (tests/ is on the path: pytest puts each conftest's folder there).
"""
