"""Tests of hardware_profiles: the profile YAML, its schema, its reader and its prices."""
