"""The one compiled part: agent/collectors/_cgread.c, the cgroup batch reader's inner loop (see its header).

Optional: where no C compiler is found, the wheel is built without it and the agent reads the same files the
Python way (agent/collectors/files.py), at about 1.3 times the CPU (README, Measured)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("agent.collectors._cgread", ["agent/collectors/_cgread.c"], optional=True)])
