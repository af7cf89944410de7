"""Running a suite into the result store (`flashprobe ablate`): prepare, plan, train, replay."""
