"""pulumi-policy's sentinel for an unknown string (pulumi_policy/proxy.py UNKNOWN_STRING_VALUE, the
value the engine sends for an output not known during a preview), for tests in the main venv where
pulumi-policy is not installed."""

UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
