//! The reference Gate client (docs/architecture.md#gate): the developer-tool side of a signup and a
//! login, against any Vigil. `vigil gate signup <serviceId>` starts a signup, prints the consent
//! URL (and opens a browser when one is there), polls as RFC 8628 says, writes the delivered
//! variables to an `.env` file readable by its owner only, and acknowledges.
//! `vigil gate login <serviceId>` starts a login with the agent token from that file (or
//! `--agent-token`) and prints the consent URL; approving it takes the person's browser to the
//! service's dashboard.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::config::{GateLoginArgs, GateSignupArgs};

/// `POST /v1/gate/services/{serviceId}/signups`' body: the tool's name, shown to the person.
#[derive(serde::Serialize)]
struct SignupStart<'a> {
    client_name: &'a str,
}

/// `POST /v1/gate/sessions/{id}/ack`'s body: the token the approved poll answered.
#[derive(serde::Serialize)]
struct Acknowledgement<'a> {
    ack_token: &'a str,
}

/// `POST /v1/gate/login-sessions`' body: the service whose dashboard the person logs in to.
#[derive(serde::Serialize)]
struct LoginStart<'a> {
    service_id: &'a str,
}

fn client() -> anyhow::Result<reqwest::Client> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .user_agent(concat!("vigil-gate/", env!("CARGO_PKG_VERSION")))
        .timeout(Duration::from_secs(30))
        .build()
        .context("building the HTTP client")
}

/// The `data` of a Vigil answer, or the error envelope's message.
async fn data(response: reqwest::Response) -> anyhow::Result<(u16, Value)> {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let body: Value = response.json().await.context("reading Vigil's answer")?;
    if let Some(error) = body.get("error") {
        let code = error["code"].as_str().unwrap_or("");
        if code == "gate.slow_down" {
            return Ok((429, json!({"retry_after": retry_after.unwrap_or(10)})));
        }
        bail!(
            "{} ({code})",
            error["message"]
                .as_str()
                .unwrap_or("Vigil refused the request")
        );
    }
    Ok((status, body["data"].clone()))
}

/// Opens `url` in a browser when this machine has one to show; whether it tried.
fn open_browser(url: &str) -> bool {
    let has_display = std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some()
        || cfg!(target_os = "macos");
    if !has_display {
        return false;
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(opener)
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}

/// Prints the user code first, as `gh auth login` does (the person types it on the consent
/// page: RFC 8628 §5.4), then the consent URL, and opens the URL in a browser only if it is on
/// the Vigil the command talks to (a server's answer never makes this open anything else).
fn show_consent(started: &Value, endpoint: &str) -> anyhow::Result<()> {
    let url = started["consent_url"].as_str().context("no consent URL")?;
    // Printed only in the form a user code has: an answer cannot put other text on the
    // person's terminal in its place.
    let code = started["user_code"]
        .as_str()
        .filter(|c| schemas::gate::normalize_user_code(c).is_some() && c.is_ascii())
        .context("Vigil's answer has no user code (is it an older Vigil?)")?;
    println!("! First copy your one-time code: {code}");
    println!("Then open this address in your own browser, and type the code there to approve:");
    println!("{url}");
    let same_origin = match (reqwest::Url::parse(url), reqwest::Url::parse(endpoint)) {
        (Ok(u), Ok(e)) => matches!(u.scheme(), "http" | "https") && u.origin() == e.origin(),
        _ => false,
    };
    if same_origin && open_browser(url) {
        println!("(a browser was asked to open it)");
    }
    let _ = std::io::stdout().flush();
    Ok(())
}

/// The names the `.env` file at `path` sets (none if it does not exist).
fn env_names(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(name, _)| name.trim().trim_start_matches("export ").trim().to_owned())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect()
}

/// Writes `variables` into the `.env` file at `path`, replacing lines of the same names and
/// keeping the others; the file is made readable and writable by its owner only.
fn write_env(path: &Path, variables: &serde_json::Map<String, Value>) -> anyhow::Result<()> {
    let existing = std::fs::read_to_string(path).unwrap_or_default();
    let mut lines: Vec<String> = existing
        .lines()
        .filter(|l| {
            let name = l.split('=').next().unwrap_or("").trim();
            !variables.contains_key(name)
        })
        .map(str::to_owned)
        .collect();
    for (name, value) in variables {
        let value = value.as_str().unwrap_or_default();
        // Quoted and escaped, so a value with spaces or `#` reads back whole and one with a
        // line break cannot set other variables.
        let escaped = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
            .replace('\r', "\\r");
        lines.push(format!("{name}=\"{escaped}\""));
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // An existing file keeps its mode on open: narrowed here too.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all((lines.join("\n") + "\n").as_bytes())?;
    Ok(())
}

fn base(endpoint: &str) -> String {
    endpoint.trim_end_matches('/').to_owned()
}

pub async fn signup(args: GateSignupArgs) -> anyhow::Result<()> {
    let http = client()?;
    let base = base(&args.endpoint);
    let (_, started) = data(
        http.post(format!(
            "{base}/v1/gate/services/{}/signups",
            args.service_id
        ))
        .json(&SignupStart {
            client_name: &args.client_name,
        })
        .send()
        .await
        .context("reaching Vigil")?,
    )
    .await?;
    let id = started["id"].as_str().context("no session id")?.to_owned();
    // Before the person approves: a variable the file holds already (another service's agent
    // token, a `DATABASE_URL`) is replaced only when asked to.
    if !args.force {
        let held = env_names(&args.env_file);
        let clashes: Vec<&str> = started["env_vars"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|name| held.iter().any(|h| h == name))
            .collect();
        if !clashes.is_empty() {
            bail!(
                "{} already holds {}; the signup would replace {}. Rerun with --force to replace \
                 {}, or choose another file with --env-file",
                args.env_file.display(),
                clashes.join(", "),
                if clashes.len() == 1 { "it" } else { "them" },
                if clashes.len() == 1 { "it" } else { "them" },
            );
        }
    }
    let token = started["poll_token"]
        .as_str()
        .context("no poll token")?
        .to_owned();
    let mut interval = started["interval"].as_u64().unwrap_or(5);
    show_consent(&started, &base)?;
    let delivered = loop {
        tokio::time::sleep(Duration::from_secs(interval)).await;
        let (status, answer) = data(
            http.get(format!("{base}/v1/gate/sessions/{id}"))
                .bearer_auth(&token)
                .send()
                .await
                .context("polling Vigil")?,
        )
        .await?;
        if status == 429 {
            interval = answer["retry_after"].as_u64().unwrap_or(interval + 5);
            continue;
        }
        interval = answer["interval"].as_u64().unwrap_or(interval);
        match answer["status"].as_str() {
            Some("pending") => continue,
            Some("approved") => break answer,
            Some("denied") => bail!("the signup was denied; nothing was shared"),
            Some("expired") => bail!("the signup expired before it was approved; start again"),
            other => bail!("the signup ended as {other:?}"),
        }
    };
    let variables = delivered["env_vars"]
        .as_object()
        .context("no variables delivered")?;
    // Only what the signup said it would deliver, which the clash check above has seen.
    let announced: Vec<&str> = started["env_vars"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let unannounced: Vec<&String> = variables
        .keys()
        .filter(|name| !announced.contains(&name.as_str()))
        .collect();
    if !unannounced.is_empty() && !args.force {
        bail!(
            "the delivery holds variables the signup did not announce ({}); nothing was \
             written. Rerun with --force to accept them",
            unannounced
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    write_env(&args.env_file, variables)?;
    let ack = delivered["ack_token"].as_str().context("no ack token")?;
    data(
        http.post(format!("{base}/v1/gate/sessions/{id}/ack"))
            .json(&Acknowledgement { ack_token: ack })
            .send()
            .await
            .context("acknowledging")?,
    )
    .await?;
    println!(
        "Signed up to {}: {} variables written to {} (readable by you only).",
        args.service_id,
        variables.len(),
        args.env_file.display()
    );
    Ok(())
}

/// The agent token: `--agent-token`, else the variable Gate delivered it under in the `.env`.
fn agent_token(args: &GateLoginArgs) -> anyhow::Result<String> {
    if let Some(token) = &args.agent_token {
        return Ok(token.clone());
    }
    let name = schemas::gate::agent_token_variable(&args.service_id);
    let text = std::fs::read_to_string(&args.env_file)
        .with_context(|| format!("reading {}", args.env_file.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .with_context(|| {
            format!(
                "{name} is not in {}; run `vigil gate signup` first",
                args.env_file.display()
            )
        })
}

pub async fn login(args: GateLoginArgs) -> anyhow::Result<()> {
    let http = client()?;
    let base = base(&args.endpoint);
    let token = agent_token(&args)?;
    let (_, started) = data(
        http.post(format!("{base}/v1/gate/login-sessions"))
            .bearer_auth(&token)
            .json(&LoginStart {
                service_id: &args.service_id,
            })
            .send()
            .await
            .context("reaching Vigil")?,
    )
    .await?;
    show_consent(&started, &base)?;
    println!(
        "Approving it takes your browser to the {} dashboard, logged in.",
        args.service_id
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_values_stay_on_their_line_and_the_file_is_private() {
        let path = std::env::temp_dir().join(format!("vigil-gate-env-{}", std::process::id()));
        std::fs::write(&path, "KEEP=1\nACME_API_KEY=old\n").unwrap();
        let mut vars = serde_json::Map::new();
        vars.insert(
            "ACME_API_KEY".into(),
            Value::String("new\"\nOTHER_GATE_AGENT_TOKEN=agt_stolen".into()),
        );
        write_env(&path, &vars).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "KEEP=1",
                r#"ACME_API_KEY="new\"\nOTHER_GATE_AGENT_TOKEN=agt_stolen""#
            ]
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        std::fs::remove_file(&path).unwrap();
    }
}
