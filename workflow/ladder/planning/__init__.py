"""Planning a run: config checks, the plan, the measurement protocol, the experiments, rerun targets."""
