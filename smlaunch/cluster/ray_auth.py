"""Ray's token settings, taken again after sm-launch put them in the environment.

Ray reads `RAY_AUTH_MODE` and `RAY_AUTH_TOKEN` once, when `ray._raylet` loads, and caches the
token. sm-launch sets them only as its cluster comes up, and by then Ray may be loaded already: a
user's module checked at `plan` time that imports `ray.train` (a `trainer.loop`, whose module
always does), or a notebook that imported Ray before `smlaunch.run`. Its first GCS call then went
out without the token ("InvalidAuthToken ... RAY_AUTH_MODE is currently 'disabled'") and the job
failed to start. Ray's own tests re-read the settings the same way
(`ray/_private/authentication_test_utils.py`, `reset_auth_token_state`).
"""

from __future__ import annotations

import sys


def reload_ray_auth() -> None:
    """If Ray is loaded in this process, make it read its token settings from the environment again."""
    if "ray._raylet" not in sys.modules:
        return  # Ray reads them when it loads
    from smlaunch._ray_compat import reload_auth_token

    reload_auth_token()
