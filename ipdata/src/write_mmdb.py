"""Writes a MaxMind DB file for the tests, with `mmdb-writer` (PyPI), from a JSON spec on
stdin: {"path", "database_type", "ip_version", "networks": [[cidr, record], ...]}, every
integer written as a 32-bit unsigned one, as the ASN layouts store their numbers."""

import json
import sys

from mmdb_writer import MMDBWriter
from netaddr import IPSet

spec = json.load(sys.stdin)
writer = MMDBWriter(
    ip_version=spec["ip_version"],
    database_type=spec["database_type"],
    languages=["en"],
    description={"en": "Vigil's test fixture"},
    ipv4_compatible=spec["ip_version"] == 6,
    int_type="u32",
)


for cidr, record in spec["networks"]:
    writer.insert_network(IPSet([cidr]), record)
writer.to_db_file(spec["path"])
