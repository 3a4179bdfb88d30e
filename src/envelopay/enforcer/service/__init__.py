"""The enforcer process: HTTP routes, the operator console, metrics, retention, and its
launch from options."""
