"""Fakes of node sources (cgroup trees, NVML, sysfs, /proc) shared by the unit tests and the benchmarks."""
