"""A free TCP port on 127.0.0.1 (the kernel picks it; taken again by whoever binds it next)."""

from smlaunch.cluster.rendezvous import free_port

__all__ = ["free_port"]
