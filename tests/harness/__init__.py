"""Builds and runs the real Kubernetes components Loadline is tested against.

Nothing here fakes the API server: `build` compiles kube-apiserver, kube-scheduler,
kubectl, etcd, helm and kwok from the Go module proxy into a per-user cache, and
`controlplane` starts them on loopback ports.
"""
