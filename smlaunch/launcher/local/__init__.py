"""The local path: every host of the config simulated as a Ray node on this machine."""
