//! Deciding on Gate's consent page as its two kinds of visitor do: a person in a real browser
//! ([`person_decides`]: Chromium with no automation client, input through the X server, driven
//! by `tests/recorder/person.mjs`, typing the user code its tool showed), and a script that
//! fetches the page and posts the form with a browser's headers forged ([`script_decides`]),
//! which Vigil must refuse.

use reqwest::header;

use crate::detection::recorder_script;

/// The client a script uses: no redirects followed, so a login's redirect can be read.
pub fn script_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// A consent page as a script fetched it: the form's cookie and hidden members.
pub struct FetchedPage {
    pub html: String,
    /// The `Set-Cookie` pair the form's token must match.
    pub cookie: String,
    pub token: String,
    pub csrf: String,
    /// The publishable key the page loads Vigil's SDK with.
    pub key: String,
    /// The one-time ticket the page's SDK opens its collect session with.
    pub ticket: String,
}

pub async fn fetch_page(consent_url: &str) -> FetchedPage {
    let page = script_client().get(consent_url).send().await.unwrap();
    assert_eq!(page.status(), 200, "the consent page opens");
    let cookie = page.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let html = page.text().await.unwrap();
    FetchedPage {
        token: attribute(&html, r#"name="token" value=""#),
        csrf: attribute(&html, r#"name="csrf" value=""#),
        key: attribute(&html, r#"data-key=""#),
        ticket: attribute(&html, r#"data-ticket=""#),
        cookie,
        html,
    }
}

fn attribute(html: &str, marker: &str) -> String {
    let at = html
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in the page"))
        + marker.len();
    html[at..at + html[at..].find('"').unwrap()].to_owned()
}

/// Posts `decision` as a script does: the page's cookie and form token, and every header a
/// browser would send for its person's press of the button, forged; `user_code` and `handoff`
/// as given (none: the form as the page serves it).
pub async fn script_decides(
    consent_url: &str,
    user_code: Option<&str>,
    decision: &str,
    handoff: Option<&str>,
) -> reqwest::Response {
    let page = fetch_page(consent_url).await;
    let action = consent_url.split('?').next().unwrap();
    let origin = reqwest::Url::parse(action)
        .unwrap()
        .origin()
        .ascii_serialization();
    let mut form = vec![
        ("token", page.token.as_str()),
        ("csrf", page.csrf.as_str()),
        ("decision", decision),
    ];
    if let Some(code) = user_code {
        form.push(("user_code", code));
    }
    if let Some(handoff) = handoff {
        form.push(("handoff", handoff));
    }
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    script_client()
        .post(action)
        .header(header::ORIGIN, origin)
        .header("sec-fetch-site", "same-origin")
        .header("sec-fetch-mode", "navigate")
        .header("sec-fetch-user", "?1")
        .header("sec-fetch-dest", "document")
        .header(header::COOKIE, &page.cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// A person decides on the consent page of a started signup or login (`started`: the answer,
/// with its `consent_url` and the `user_code` the tool shows), as [`person_decides_at`] does.
pub async fn person_decides(started: &serde_json::Value, decision: &str) -> String {
    person_decides_at(
        started["consent_url"].as_str().expect("a consent URL"),
        started["user_code"].as_str().expect("a user code"),
        decision,
    )
    .await
}

/// A person opens `consent_url` in Chromium and moves the pointer a little; to approve, they
/// Tab to the user code field, type `user_code` key by key and Tab to Approve; to deny, they
/// Tab past the field (Approve stays disabled without a code) to Deny. Enter presses the
/// button. The text of the page the browser ends on.
pub async fn person_decides_at(consent_url: &str, user_code: &str, decision: &str) -> String {
    let tabs = tabs_to_code_field(consent_url).await;
    let code = match decision {
        "approve" => user_code,
        "deny" => "",
        other => panic!("no button {other}"),
    };
    let args = [
        "--url",
        consent_url,
        "--tabs",
        &tabs.to_string(),
        "--code",
        code,
        "--then",
        "1",
    ];
    let report = recorder_script("node", "person.mjs", &args).await;
    report["text"].as_str().unwrap_or_default().to_owned()
}

/// Tab presses that reach the user code field from the top of the consent page: every link
/// before the form, then the field.
async fn tabs_to_code_field(consent_url: &str) -> usize {
    let page = fetch_page(consent_url).await;
    page.html[..page.html.find("<form").expect("the form")]
        .matches("<a href=")
        .count()
        + 1
}

/// A driver patched against DevTools detection approves the consent page of `started` as a
/// careful operator would (`tests/recorder/consent.mjs`): `driver` is `rebrowser` or
/// `patchright`, `input` `careful`, `whole_pixels` or `keyboard`, and `position` where its
/// window is placed (Chromium's own place if none). The text of the page it ends on.
pub async fn patched_driver_approves(
    started: &serde_json::Value,
    driver: &str,
    input: &str,
    position: Option<&str>,
) -> String {
    let consent_url = started["consent_url"].as_str().expect("a consent URL");
    let tabs = tabs_to_code_field(consent_url).await.to_string();
    let mut args = vec![
        "--url",
        consent_url,
        "--code",
        started["user_code"].as_str().expect("a user code"),
        "--driver",
        driver,
        "--input",
        input,
        "--tabs",
        &tabs,
    ];
    if let Some(position) = position {
        args.extend(["--position", position]);
    }
    let report = recorder_script("node", "consent.mjs", &args).await;
    report["text"].as_str().unwrap_or_default().to_owned()
}

/// An approval-laundering relay on its own origin (`tests/recorder/relay.mjs`): an unrelated
/// page that runs Vigil's SDK through the relay with the consent page's publishable `key` (and
/// a consent page's `ticket`, if given), used by a person in a real Chromium. The handoff it
/// got.
pub async fn relay_hands_off(api: &str, key: &str, ticket: Option<&str>) -> String {
    let mut args = vec!["--api", api, "--key", key];
    if let Some(ticket) = ticket {
        args.extend(["--ticket", ticket]);
    }
    let report = recorder_script("node", "relay.mjs", &args).await;
    report["handoff"]
        .as_str()
        .unwrap_or_else(|| panic!("relay.mjs got no handoff: {report}"))
        .to_owned()
}
