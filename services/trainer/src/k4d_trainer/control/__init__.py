"""The trainer's control plane: TrainerService (gRPC), the `k4d.train.requested` worker,
durable job records in the object store, and the launchers (local `k4d train`
subprocesses, or Kubeflow PyTorchJobs on Kubernetes).

Modules: `jobs` (pure record logic), `spec` (TrainingJobSpec -> recipe config),
`records` (object-store persistence), `events`, `launcher` + `pytorchjob` + `kube`,
`worker`, `api`, `server`, `settings`.
"""
