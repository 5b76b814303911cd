#!/usr/bin/env python3
"""Writes processor/data/zone-countries.tsv from the system's tz database (Debian's tzdata):
each IANA zone a browser may report, with every country it is used in. The processor's
`timezone_mismatch` reads it (processor/src/zone_countries.rs). Run it again after a tzdata
release; the tz database is in the public domain.

A zone's countries are those zone.tab gives it, with those zone1970.tab gives it (which
merges zones that agree since 1970 and lists every country of each); a link (an old name such
as Asia/Calcutta or Europe/Kiev, which some browsers still report) takes its target's countries
too."""
import pathlib
import sys

zoneinfo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/zoneinfo")
countries: dict[str, set[str]] = {}


def rows(name):
    for line in (zoneinfo / name).read_text().splitlines():
        if line and not line.startswith("#"):
            yield line.split("\t")


for codes, _, zone, *_ in rows("zone.tab"):
    countries.setdefault(zone, set()).update(codes.split(","))
for codes, _, zone, *_ in rows("zone1970.tab"):
    countries.setdefault(zone, set()).update(codes.split(","))

version = "unknown"
links = []
for line in (zoneinfo / "tzdata.zi").read_text().splitlines():
    if line.startswith("# version"):
        version = line.split()[-1]
    if line.startswith("L "):
        _, target, alias = line.split()
        links.append((target, alias))
for target, alias in links:
    if target in countries:
        countries.setdefault(alias, set()).update(countries[target])

out = pathlib.Path(__file__).resolve().parent.parent / "processor/data/zone-countries.tsv"
with out.open("w") as f:
    f.write(f"# IANA zone, then the ISO 3166 countries it is used in: tz database {version}\n")
    f.write("# (public domain), written by scripts/zone-countries.py.\n")
    for zone in sorted(countries):
        f.write(f"{zone}\t{','.join(sorted(countries[zone]))}\n")
print(f"{out}: {len(countries)} zones, tz {version}")
