"""The policy pack Pulumi runs (``pulumi preview --policy-pack policy``): every rule of
infra/policy/, mandatory. Constructing the PolicyPack starts its gRPC server and never returns, so
this module only wires; policy/pack.py holds the adapter that the tests call directly."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack

from policy.pack import PACK_NAME, policies

PolicyPack(name=PACK_NAME, policies=policies(), enforcement_level=EnforcementLevel.MANDATORY)
