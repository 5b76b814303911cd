//! Where the session's address is (docs/detection.md#network-identity): the network facts the
//! processor looked up when the session's first batch came (`ServerContext::network`), judged
//! against what the browser claims. A hosting network, a Tor exit or a VPN is not a program:
//! a person may use any of them, so each weighs little, and only the rules table's rows that
//! combine them with automation evidence make more of them.

use schemas::network::{Vpn, VpnMethods};
use serde_json::json;

use super::Fired;
use crate::observations::{Probes, ServerContext};
use crate::user_agent::{ClaimedBrowser, Os};
use crate::zone_countries;

/// The VPN judgement of a session: `None` without network facts (no IP data configured, or
/// the address was not one).
pub(super) fn judge_vpn(
    probes: Option<&Probes>,
    context: &ServerContext,
    claimed: &ClaimedBrowser,
) -> Option<Vpn> {
    let network = context.network.as_ref()?;
    let desktop_browser = claimed.is_desktop()
        && matches!(
            claimed.os,
            Os::Windows | Os::MacOs | Os::Linux | Os::ChromeOs
        );
    Some(Vpn::of(VpnMethods {
        timezone_mismatch: zone_outside_country(probes, context).is_some(),
        hosting_desktop: desktop_browser && network.hosting == Some(true),
        relay: network.relay == Some(true),
    }))
}

/// The browser's zone and the address's country when no one in that country uses the zone.
fn zone_outside_country<'a>(
    probes: Option<&'a Probes>,
    context: &'a ServerContext,
) -> Option<(&'a str, &'a str, &'static [&'static str])> {
    let zone = probes?.locale.as_ref()?.timezone.as_deref()?;
    let country = context.network.as_ref()?.country.as_deref()?;
    if !zone_countries::known_country(country) {
        return None;
    }
    let used_in = zone_countries::countries(zone)?;
    (!used_in.iter().any(|c| c.eq_ignore_ascii_case(country))).then_some((zone, country, used_in))
}

pub(super) fn detect(
    probes: Option<&Probes>,
    context: &ServerContext,
    claimed: &ClaimedBrowser,
    fired: &mut Fired,
) {
    let Some(network) = &context.network else {
        return;
    };
    let asn = network.asn.as_ref().map(|a| a.number);
    if network.hosting == Some(true) {
        fired.fire(
            "datacenter_ip",
            json!({ "asn": asn, "provider": network.hosting_provider }),
        );
    }
    if network.tor_exit == Some(true) {
        fired.fire("tor_exit_node", json!({ "tor_exit": true }));
    }
    if let Some((zone, country, used_in)) = zone_outside_country(probes, context) {
        fired.fire(
            "timezone_mismatch",
            json!({ "browser_timezone": zone, "ip_country": country, "zone_countries": used_in }),
        );
    }
    if let Some(vpn) = judge_vpn(probes, context, claimed).filter(|v| v.result) {
        fired.fire(
            "vpn_suspected",
            json!({ "confidence": vpn.confidence, "methods": vpn.methods }),
        );
    }
}
