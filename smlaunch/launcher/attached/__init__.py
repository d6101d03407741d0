"""The attached path: a Ray cluster that is already running (`connect`, `run`), and the job as
KubeRay objects (`kuberay`)."""
