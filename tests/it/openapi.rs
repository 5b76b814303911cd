//! The OpenAPI document (docs/api.md#openapi): served at `/v1/openapi.json` without a key, equal
//! to the committed `docs/openapi.json` (so every contract change shows in review), valid
//! OpenAPI 3.1 by `openapi-spec-validator`, and naming only routes the server answers.
//! `VIGIL_UPDATE_OPENAPI=1` writes the served document to the snapshot instead of comparing.

use serde_json::Value;
use vigil_tests::{TestServer, run_client};

const SNAPSHOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");

/// A value of the path parameter `name` of the right form (the document's own example).
fn example(doc: &Value, path: &str, method: &str, name: &str) -> String {
    doc["paths"][path][method]["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .and_then(|p| {
            p["example"]
                .as_str()
                .or_else(|| resolved(doc, &p["schema"])["examples"][0].as_str())
        })
        .unwrap_or_else(|| panic!("{method} {path}: parameter {name} has no example"))
        .to_owned()
}

/// `schema`, or what its `$ref` names.
fn resolved<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(pointer) => doc
            .pointer(pointer.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("{pointer} is not in the document")),
        None => schema,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_is_the_committed_one_valid_and_names_served_routes_only() {
    let s = TestServer::start().await;
    // No key: a client generator or a gateway fetches it first.
    let served = s.get("/v1/openapi.json").send().await;
    assert_eq!(served.status, 200);
    let doc = served.body.clone();
    assert_eq!(
        doc["openapi"].as_str().map(|v| &v[..3]),
        Some("3.1"),
        "{doc}"
    );

    let pretty = serde_json::to_string_pretty(&doc).unwrap() + "\n";
    if std::env::var_os("VIGIL_UPDATE_OPENAPI").is_some() {
        std::fs::write(SNAPSHOT, &pretty).unwrap();
    }
    let committed: Value = serde_json::from_str(
        &std::fs::read_to_string(SNAPSHOT).expect("docs/openapi.json is committed"),
    )
    .expect("docs/openapi.json is JSON");
    assert!(
        committed == doc,
        "the served document differs from docs/openapi.json: run the test with \
         VIGIL_UPDATE_OPENAPI=1 and review the change"
    );
    run_client("python3", &["-m", "openapi_spec_validator", SNAPSHOT]);
    // As a client generator fetches it: curl, and Python's requests, with no key.
    let url = format!("{}/v1/openapi.json", s.base);
    let by_curl: Value = serde_json::from_str(&run_client("curl", &["-sf", &url])).unwrap();
    assert!(by_curl == doc, "curl reads the same document");
    let by_requests = run_client(
        "python3",
        &[
            "-c",
            "import requests, sys; r = requests.get(sys.argv[1]); r.raise_for_status(); \
             print(r.headers['content-type']); print(len(r.json()['paths']))",
            &url,
        ],
    );
    let paths = doc["paths"].as_object().map_or(0, |p| p.len());
    assert_eq!(by_requests, format!("application/json\n{paths}"));

    // Every operation it names is routed: called without a key, each answers its own refusal,
    // never the unknown-route 404 or a 405.
    let paths = doc["paths"].as_object().expect("paths");
    assert!(!paths.is_empty());
    let mut operations = 0;
    for (path, methods) in paths {
        for method in methods.as_object().unwrap().keys() {
            let mut concrete = path.clone();
            while let Some(open) = concrete.find('{') {
                let close = concrete[open..].find('}').unwrap() + open;
                let name = concrete[open + 1..close].to_owned();
                concrete.replace_range(open..=close, &example(&doc, path, method, &name));
            }
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let answer = s.call(method.clone(), &concrete).send().await;
            let code = answer.body["error"]["code"].as_str().unwrap_or_default();
            assert!(
                code != "request.route_not_found" && answer.status != 405,
                "{method} {concrete} is in the document but not served: {} {}",
                answer.status,
                answer.body
            );
            operations += 1;
        }
    }
    assert!(operations >= 3, "{operations} operations");
}

/// The constraints the document states are the ones the handlers enforce (`schemas::validate`),
/// though `#[schema(...)]` takes them as literals.
#[test]
fn documented_constraints_are_the_enforced_ones() {
    use schemas::validate::{NAME_MAX_CHARS, ORIGINS_MAX, SLUG_MAX_LEN, SLUG_PATTERN};
    let doc = serde_json::to_value(vigil::server::openapi::document()).unwrap();
    let schema = |name: &str| doc["components"]["schemas"][name]["properties"].clone();
    let organization = schema("NewOrganization");
    assert_eq!(organization["slug"]["pattern"], SLUG_PATTERN);
    assert_eq!(organization["slug"]["maxLength"], SLUG_MAX_LEN);
    for body in [
        "NewOrganization",
        "OrganizationChange",
        "NewApiKey",
        "ApiKeyChange",
    ] {
        assert_eq!(schema(body)["name"]["maxLength"], NAME_MAX_CHARS, "{body}");
    }
    for body in ["NewApiKey", "ApiKeyChange"] {
        assert_eq!(
            schema(body)["allowed_origins"]["maxItems"],
            ORIGINS_MAX,
            "{body}"
        );
    }

    // The text and URI patterns, which schemas::validate's tests generate strings from.
    use schemas::validate::{
        HTTP_URI_MAX_BYTES, HTTP_URI_PATTERN, ORIGIN_PATTERN, SHOWN_LINE_PATTERN,
        SHOWN_NONBLANK_PATTERN, SHOWN_TEXT_PATTERN,
    };
    let schemas = &doc["components"]["schemas"];
    assert_eq!(schemas["Origin"]["pattern"], ORIGIN_PATTERN);
    let draft = schema("Draft");
    assert_eq!(draft["name"]["pattern"], SHOWN_LINE_PATTERN);
    assert_eq!(draft["description"]["pattern"], SHOWN_TEXT_PATTERN);
    assert_eq!(
        schema("SignupBody")["client_name"]["pattern"],
        SHOWN_LINE_PATTERN
    );
    assert_eq!(schema("GateEnvVar")["name"]["pattern"], SHOWN_LINE_PATTERN);
    // Every stored display name has the one rule (schemas::validate::name).
    assert_eq!(schema("GateSdk")["label"]["pattern"], SHOWN_LINE_PATTERN);
    for body in [
        "NewOrganization",
        "OrganizationChange",
        "NewApiKey",
        "ApiKeyChange",
        "NewEndpoint",
        "EndpointChange",
    ] {
        assert_eq!(
            schema(body)["name"]["pattern"],
            SHOWN_LINE_PATTERN,
            "{body}"
        );
    }
    assert_eq!(
        schema("GateSdk")["install"]["pattern"],
        SHOWN_NONBLANK_PATTERN
    );
    assert_eq!(
        schema("BrandingBody")["ascii_art"]["pattern"],
        SHOWN_TEXT_PATTERN
    );
    for uri in [
        &draft["website"],
        &draft["docs_url"],
        &schema("GateSdk")["url"],
        &schema("BrandingBody")["logo_url"],
        &schema("GateConsent")["terms_url"],
        &schema("GateConsent")["privacy_url"],
    ] {
        assert_eq!(uri["pattern"], HTTP_URI_PATTERN, "{uri}");
        assert_eq!(uri["maxLength"], HTTP_URI_MAX_BYTES, "{uri}");
    }
}

/// The route tables a reader meets (docs/api.md, docs/gate.md#routes, docs/sdk.md's Collect
/// API) name exactly the document's operations: a route added to one and not the other fails.
#[test]
fn the_docs_route_tables_are_the_documents_operations() {
    use std::collections::BTreeSet;
    let doc = serde_json::to_value(vigil::server::openapi::document()).unwrap();
    let documented: BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, methods)| {
            methods
                .as_object()
                .unwrap()
                .keys()
                .map(|m| (m.to_uppercase(), path.clone()))
        })
        .collect();

    let mut tabled = BTreeSet::new();
    for page in ["api.md", "gate.md", "sdk.md"] {
        let text =
            std::fs::read_to_string(format!("{}/../docs/{page}", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
        // `| GET, POST | `/v1/…`, `/v1/…` | who may call |`
        for row in text.lines().filter(|l| l.starts_with("| ")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let (Some(methods), Some(paths)) = (cells.get(1), cells.get(2)) else {
                continue;
            };
            let paths = paths
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|p| p.starts_with("/v1/") && !p.contains('…'))
                // The document does not list itself.
                .filter(|p| *p != "/v1/openapi.json");
            for path in paths {
                for method in methods.split(',').map(str::trim) {
                    tabled.insert((method.to_owned(), path.to_owned()));
                }
            }
        }
    }
    let missing: Vec<_> = tabled.difference(&documented).collect();
    let untabled: Vec<_> = documented.difference(&tabled).collect();
    assert!(
        missing.is_empty() && untabled.is_empty(),
        "in a route table but not the document: {missing:?}; in the document but no route \
         table: {untabled:?}"
    );
    assert!(
        tabled.len() >= 40,
        "{} routes read from the tables",
        tabled.len()
    );
}

/// The error reference's table and the document's `ErrorCode` are the closed set of
/// `schemas/src/error.rs`, and every code has its section. `VIGIL_UPDATE_OPENAPI=1` rewrites
/// the table.
#[test]
fn the_error_reference_and_the_document_list_the_closed_set_of_codes() {
    use schemas::ErrorCode;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/errors.md");
    let text = std::fs::read_to_string(path).unwrap();
    let (begin, end) = ("<!-- error-codes:begin -->\n", "<!-- error-codes:end -->");
    let start = text.find(begin).expect("the table's begin marker") + begin.len();
    let stop = text.find(end).expect("the table's end marker");
    let table = ErrorCode::markdown_table();
    if std::env::var_os("VIGIL_UPDATE_OPENAPI").is_some() {
        std::fs::write(path, format!("{}{table}{}", &text[..start], &text[stop..])).unwrap();
    } else {
        assert_eq!(
            &text[start..stop],
            table,
            "docs/errors.md's table differs from ErrorCode: run with VIGIL_UPDATE_OPENAPI=1"
        );
    }
    for code in ErrorCode::ALL {
        let section = format!("## {}\n\nHTTP {}.", code.as_str(), code.status());
        assert!(text.contains(&section), "docs/errors.md lacks `{section}`");
    }

    let doc = serde_json::to_value(vigil::server::openapi::document()).unwrap();
    let listed: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode is an enum")
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    let all: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(listed, all);
    assert_eq!(
        doc["components"]["schemas"]["ErrorBody"]["properties"]["code"]["$ref"],
        "#/components/schemas/ErrorCode"
    );
}

/// Each event type's `data`, as `schemas/events.md` documents it member by member, has the same
/// members as the document's schema of that data, which its `webhooks` entry names.
#[test]
fn the_events_reference_and_the_document_give_each_events_data_the_same_members() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../schemas/events.md");
    let text = std::fs::read_to_string(path).unwrap();
    let doc = serde_json::to_value(vigil::server::openapi::document()).unwrap();
    let mut documented = Vec::new();
    for section in text.split("\n### `").skip(1) {
        let (event_type, body) = section.split_once('`').expect("a section's type");
        let mut members: Vec<&str> = body
            .lines()
            .take_while(|l| !l.starts_with("## "))
            .filter(|l| l.starts_with("| ") && !l.starts_with("| Member"))
            .filter_map(|l| l.split('|').nth(1))
            .flat_map(|cell| cell.split(','))
            .map(str::trim)
            .collect();
        members.sort_unstable();
        let webhook = &doc["webhooks"][event_type]["post"]["requestBody"]["content"]["application/json"]
            ["schema"]["allOf"][1]["properties"]["data"]["$ref"];
        let schema = webhook
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
            .unwrap_or_else(|| panic!("the webhook {event_type} names no schema of its data"));
        let mut properties: Vec<&str> = doc["components"]["schemas"][schema]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("the document has no schema {schema}"))
            .keys()
            .map(String::as_str)
            .collect();
        properties.sort_unstable();
        assert_eq!(
            members, properties,
            "schemas/events.md's members of {event_type} against the document's {schema}"
        );
        documented.push(event_type.to_owned());
    }
    documented.sort_unstable();
    let mut all: Vec<String> = schemas::events::EventType::ALL
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    all.sort_unstable();
    assert_eq!(
        documented, all,
        "schemas/events.md has a section per event type"
    );
}
