//! Deciding on Gate's consent page as its two kinds of visitor do: a person in a real browser
//! ([`person_decides`]: Chromium with no automation client, input through the X server, driven
//! by `tests/recorder/person.mjs`), and a script that fetches the page and posts the form with
//! a browser's headers forged ([`script_decides`]), which Vigil must refuse.

use std::process::Command;

use reqwest::header;

use crate::detection::recorder_dir;

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
/// browser would send for its person's press of the button, forged; `handoff` as given (none:
/// the form as the page serves it).
pub async fn script_decides(
    consent_url: &str,
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

/// A person opens `consent_url` in Chromium, moves the pointer a little, reaches the button of
/// `decision` with Tab and presses Enter. The text of the page the browser ends on.
pub async fn person_decides(consent_url: &str, decision: &str) -> String {
    let page = fetch_page(consent_url).await;
    // Tab from the top of the page: every link before the form, then Approve, then Deny.
    let links = page.html[..page.html.find("<form").expect("the form")]
        .matches("<a href=")
        .count();
    let tabs = links
        + match decision {
            "approve" => 1,
            "deny" => 2,
            other => panic!("no button {other}"),
        };
    let dir = recorder_dir();
    let url = consent_url.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .current_dir(&dir)
            .args(["person.mjs", "--url", &url, "--tabs", &tabs.to_string()])
            .output()
    })
    .await
    .expect("driver thread")
    .expect("node runs (scripts/test.sh installs nodejs)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "person.mjs failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("person.mjs printed {line:?}: {e}"));
    report["text"].as_str().unwrap_or_default().to_owned()
}
