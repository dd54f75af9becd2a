"""VolumeBinding: kube-scheduler's volume binding (PersistentVolumeClaims, WaitForFirstConsumer, provisioning)."""

from scheduler_plugin.plugins.volumebinding.args import VolumeBindingArgs
from scheduler_plugin.plugins.volumebinding.plugin import NAME, VolumeBinding

__all__ = ["NAME", "VolumeBinding", "VolumeBindingArgs"]
