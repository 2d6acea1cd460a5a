"""The local real control plane: binaries built from Go modules (build.py) and run on loopback (local.py)."""
