"""The SageMaker path: a host of a training job (`run`), and from the user's machine the request,
its offline check, the code bundle, `submit` and the job client."""
