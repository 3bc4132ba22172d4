"""The pure core: canonical encoding, contracts, grants, lifecycles and denials; no Django."""
