"""The agent's QoS arithmetic for best-effort pods: CPU suppress (cfs quota / cpuset) and memory eviction."""
