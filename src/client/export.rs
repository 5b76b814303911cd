//! `vigil export sessions|fingerprints|events` (docs/analysts.md#the-command-line): an export
//! written to a file, read from a running service (`--url`, the secret key in
//! `VIGIL_SECRET_KEY`) or, on the store's host, from the store itself. The file's extension
//! picks its format: `.arrows`, `.parquet` or `.ndjson`.
//!
//! Rows go to `<out>.part` as they arrive (an Arrow stream for `.arrows` and `.parquet`, the
//! lines themselves for `.ndjson`), and `<out>.part.json` records how much of that file holds
//! whole rows and the id of the last one: `--resume` cuts the file back to that length and asks
//! for the rows after it. A Parquet file's footer comes last, so it is written from the finished
//! stream. The file named by `--out` appears only once complete.

use std::fs::File;
use std::io::{BufReader, BufWriter, IsTerminal, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use arrow_array::{Array, RecordBatch, StringArray};
use arrow_buffer::Buffer;
use arrow_ipc::reader::{StreamDecoder, StreamReader};
use arrow_ipc::writer::StreamWriter;
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use indicatif::{ProgressBar, ProgressStyle};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use query_api::export::Export;
use schemas::OrgId;
use schemas::credential::Environment;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{ExportArgs, ExportKind};

/// How often, at most, a download's progress is made durable (the file synced and its ledger
/// rewritten): a resume repeats at most this much, and syncing costs nothing beside the rows.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Rows per Parquet row group: large enough for good compression and fast scans, small enough
/// that the writer's buffer stays a few tens of megabytes.
const ROW_GROUP_ROWS: usize = 131_072;

/// The end of an Arrow stream: a continuation marker and a zero length. A body that stops
/// without it was cut.
const END_OF_STREAM: [u8; 8] = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileFormat {
    Arrows,
    Parquet,
    Ndjson,
}

impl FileFormat {
    fn of(path: &Path) -> anyhow::Result<FileFormat> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("arrows") => Ok(FileFormat::Arrows),
            Some("parquet") => Ok(FileFormat::Parquet),
            Some("ndjson") => Ok(FileFormat::Ndjson),
            _ => bail!(
                "--out {} must end in .arrows, .parquet or .ndjson, which picks the format",
                path.display()
            ),
        }
    }

    /// The `format=` the rows are read in: Parquet is written from an Arrow stream.
    fn wire(self) -> &'static str {
        match self {
            FileFormat::Ndjson => "ndjson",
            FileFormat::Arrows | FileFormat::Parquet => "arrows",
        }
    }
}

/// `<out>.part.json`: how far a download got. It never holds the key.
#[derive(Debug, Serialize, Deserialize)]
struct Ledger {
    export: String,
    /// The query the export began with; `to` is the window's end the service fixed, so a
    /// resume reads the same window.
    query: Vec<(String, String)>,
    /// Whether the id column is written, or only read to know where a resume continues.
    keep_id: bool,
    /// The id of the last row in the file.
    after: Option<String>,
    rows: u64,
    /// How many bytes of `<out>.part` hold whole rows.
    bytes: u64,
}

/// The files of one export.
struct Paths {
    out: PathBuf,
    part: PathBuf,
    ledger: PathBuf,
}

impl Paths {
    fn of(out: &Path) -> Paths {
        let with = |suffix: &str| {
            let mut name = out.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        Paths {
            out: out.to_owned(),
            part: with(".part"),
            ledger: with(".part.json"),
        }
    }
}

pub async fn run(args: ExportArgs) -> anyhow::Result<()> {
    let format = FileFormat::of(&args.out)?;
    let export = match args.export {
        ExportKind::Sessions => Export::Sessions,
        ExportKind::Fingerprints => Export::Fingerprints,
        ExportKind::Events => Export::Events,
    };
    if export != Export::Sessions && (args.verdict.is_some() || args.search.is_some()) {
        bail!("--verdict and --search filter the sessions export only");
    }
    let paths = Paths::of(&args.out);
    let asked = asked_query(&args, export, format);
    let mut ledger = if args.resume {
        resume(&paths, &asked)?
    } else {
        begin(&paths, asked)?
    };
    let mut query = ledger.query.clone();
    if let Some(after) = &ledger.after {
        query.push(("after".into(), after.clone()));
    }
    let body = match &args.url {
        Some(url) => over_http(url, export, &args, &query).await?,
        None => from_store(export, &args, &query).await?,
    };
    if !ledger.query.iter().any(|(k, _)| k == "to") {
        ledger.query.push(("to".into(), body.to));
    }
    // Opened once the export was accepted: a refused one leaves no file behind.
    let file = part_file(&paths, args.resume, ledger.bytes)?;
    let bar = progress_bar(ledger.rows);
    let mut sink = Sink::new(
        format,
        file,
        ledger,
        &paths,
        export.id_column(),
        bar.clone(),
    );
    let mut bytes = body.bytes;
    while let Some(chunk) = bytes.next().await {
        let taken = chunk.and_then(|c| sink.take(c));
        if let Err(e) = taken {
            bar.abandon();
            sink.checkpoint()?;
            bail!(
                "the export broke after {} rows ({e:#}); run the same command with --resume \
                 to continue it",
                sink.ledger.rows
            );
        }
    }
    let rows = sink.finish(&paths)?;
    bar.finish_and_clear();
    if std::io::stderr().is_terminal() {
        eprintln!("{rows} rows written to {}", paths.out.display());
    }
    Ok(())
}

/// The query the command line asks for; the id column is always read, since it is where a
/// resume continues, and dropped again if `--columns` leaves it out.
fn asked_query(args: &ExportArgs, export: Export, format: FileFormat) -> Ledger {
    let mut query = vec![("format".to_owned(), format.wire().to_owned())];
    let mut keep_id = true;
    if let Some(columns) = args.columns.as_deref().filter(|c| !c.trim().is_empty()) {
        let id = export.id_column();
        let mut list = columns.to_owned();
        if !columns.split(',').any(|c| c.trim() == id) {
            keep_id = false;
            list = format!("{id},{list}");
        }
        query.push(("columns".into(), list));
    }
    if let Some(rows) = args.batch_size {
        query.push(("batch_size".into(), rows.to_string()));
    }
    for (name, value) in [
        ("from", &args.from),
        ("to", &args.to),
        ("verdict", &args.verdict),
        ("search", &args.search),
    ] {
        if let Some(value) = value {
            query.push((name.into(), value.clone()));
        }
    }
    Ledger {
        export: export.id_column().to_owned(),
        query,
        keep_id,
        after: None,
        rows: 0,
        bytes: 0,
    }
}

/// A new export, refused if a broken one is there to resume.
fn begin(paths: &Paths, asked: Ledger) -> anyhow::Result<Ledger> {
    if paths.ledger.exists() {
        bail!(
            "{} holds a broken export; add --resume to continue it, or remove it and {} to \
             start again",
            paths.part.display(),
            paths.ledger.display()
        );
    }
    Ok(asked)
}

/// A broken export's ledger, to continue it. The command line must ask for the same export
/// it began as.
fn resume(paths: &Paths, asked: &Ledger) -> anyhow::Result<Ledger> {
    let text = std::fs::read_to_string(&paths.ledger).with_context(|| {
        format!(
            "nothing to resume: {} is not there (an export that finished leaves none)",
            paths.ledger.display()
        )
    })?;
    let ledger: Ledger = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a ledger vigil wrote", paths.ledger.display()))?;
    let given = |name: &str| asked.query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let saved = |name: &str| ledger.query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    if ledger.export != asked.export {
        bail!(
            "{} is a broken export of another kind",
            paths.part.display()
        );
    }
    for name in ["format", "columns", "verdict", "search"] {
        if given(name) != saved(name) {
            bail!(
                "--resume continues the export as it began: its {name} was {}",
                saved(name).map_or("not given", String::as_str)
            );
        }
    }
    for name in ["from", "to"] {
        if let Some(given) = given(name)
            && saved(name).and_then(|s| instant(s)) != instant(given)
        {
            bail!(
                "--resume continues the export as it began: its --{name} was {}",
                saved(name).map_or("not given", String::as_str)
            );
        }
    }
    Ok(ledger)
}

/// `<out>.part`: created empty for a new export; for a resumed one, cut back to the `whole`
/// bytes its rows fill (whatever was written after the last whole row arrives again).
fn part_file(paths: &Paths, resume: bool, whole: u64) -> anyhow::Result<File> {
    if !resume {
        return create_private(&paths.part).with_context(|| {
            format!(
                "creating {} (a file already there is never written into: remove it, or add \
                 --resume if it is this export's)",
                paths.part.display()
            )
        });
    }
    let mut file = open_own_regular(&paths.part)?;
    file.set_len(whole)
        .with_context(|| format!("cutting {} back", paths.part.display()))?;
    file.seek(std::io::SeekFrom::End(0))?;
    Ok(file)
}

/// Creates `path` for this user alone (0600), failing if anything is there already: a file, or a
/// symbolic link, which is never followed. Where an export writes is often a shared directory
/// (`/tmp`), where another user could have put a link to a file of the user's, or a file of
/// their own that would keep its owner and mode while it took the user's rows.
fn create_private(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// A file of this export to write again (`--resume`): opened without following a symbolic
/// link, and taken only if it is a regular file this user owns.
fn open_own_regular(path: &Path) -> anyhow::Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .with_context(|| {
            format!(
                "opening {} (it must be a regular file, not a symbolic link)",
                path.display()
            )
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!(
            "{} is not a regular file; --resume writes only into one",
            path.display()
        );
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        bail!(
            "{} belongs to another user; --resume writes only into the user's own file",
            path.display()
        );
    }
    Ok(file)
}

fn instant(raw: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(raw)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// An export's bytes, as the endpoint answers them, with the window's end they cover.
struct Body {
    to: String,
    bytes: BoxStream<'static, anyhow::Result<Bytes>>,
}

async fn over_http(
    url: &str,
    export: Export,
    args: &ExportArgs,
    query: &[(String, String)],
) -> anyhow::Result<Body> {
    let key = std::env::var("VIGIL_SECRET_KEY")
        .ok()
        .filter(|k| !k.is_empty())
        .context("--url needs a secret key (sk_...) in VIGIL_SECRET_KEY")?;
    let path = match export {
        Export::Sessions => "/v1/sessions/export".to_owned(),
        Export::Fingerprints => "/v1/fingerprints/export".to_owned(),
        Export::Events => format!(
            "/v1/organizations/{}/events/export",
            args.organization
                .as_deref()
                .context("the events export needs --organization (org_...)")?
        ),
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .user_agent(concat!("vigil-export/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
        // A window can take minutes to stream; only a stalled one is given up.
        .read_timeout(Duration::from_secs(60))
        .build()
        .context("building the HTTP client")?;
    let response = client
        .get(format!("{}{path}", url.trim_end_matches('/')))
        .query(query)
        .bearer_auth(key)
        .send()
        .await
        .with_context(|| format!("reaching {url}"))?;
    let status = response.status();
    if !status.is_success() {
        let body: Value = response.json().await.unwrap_or_default();
        let error = &body["error"];
        let fields: Vec<(String, String)> = error["details"]["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                let text = |k: &str| f[k].as_str().unwrap_or_default().to_owned();
                (text("name"), text("issue"))
            })
            .collect();
        let allowed: Vec<String> = error["details"]["allowed_values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        bail!(
            "{url} refused the export ({status}, {}): {}",
            error["code"].as_str().unwrap_or("no error code"),
            refusal(error["message"].as_str().unwrap_or(""), &fields, &allowed)
        );
    }
    let to = response
        .headers()
        .get("vigil-export-to")
        .and_then(|v| v.to_str().ok())
        .context("the service's answer has no Vigil-Export-To; is --url a Vigil?")?
        .to_owned();
    let bytes = futures::stream::unfold(Some(response), |response| async move {
        let mut response = response?;
        match response.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), Some(response))),
            Ok(None) => None,
            Err(e) => Some((Err(anyhow!(e).context("reading the export")), None)),
        }
    })
    .boxed();
    Ok(Body { to, bytes })
}

/// The rows read from the store by this process, for an operator on the store's host (an
/// embedded store is the serving process's alone while it runs).
async fn from_store(
    export: Export,
    args: &ExportArgs,
    query: &[(String, String)],
) -> anyhow::Result<Body> {
    let raw = args.organization.as_deref().context(
        "reading the store needs --organization (org_...), whose rows are exported; or \
         --url to export from a running service",
    )?;
    let organization: OrgId = raw
        .parse()
        .map_err(|_| anyhow!("--organization {raw} is not an organization id (org_...)"))?;
    let environment =
        Environment::parse(&args.environment).context("--environment must be live or test")?;
    if args.store.is_embedded() && !args.store.data_dir.join("store").is_dir() {
        bail!(
            "there is no embedded store in {}; name it with --data-dir or --store, or export \
             from a running service with --url",
            args.store.data_dir.display()
        );
    }
    let store = store::open(&args.store.store_url())
        .await
        .context("opening the store")?;
    if store.get_organization(organization).await?.is_none() {
        bail!("the store holds no organization {raw}");
    }
    let params = edge::body::QueryParams(query.to_vec());
    let body = query_api::export::from_store(store, export, (organization, environment), &params)
        .map_err(|e| {
        let fields: Vec<(String, String)> = e
            .details
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.issue.clone()))
            .collect();
        anyhow!(
            "{}",
            refusal(&e.message, &fields, &e.details.allowed_values)
        )
    })?;
    Ok(Body {
        to: schemas::time::format(&body.to),
        bytes: body.bytes.map(|r| r.map_err(anyhow::Error::from)).boxed(),
    })
}

/// A refused query in the command line's words: each field names its flag.
fn refusal(message: &str, fields: &[(String, String)], allowed: &[String]) -> String {
    let mut text = message.to_owned();
    for (name, issue) in fields {
        text.push_str(&format!("; --{name} {issue}"));
    }
    if !allowed.is_empty() {
        text.push_str(&format!(" (one of: {})", allowed.join(", ")));
    }
    text
}

/// Rows and rate on a terminal; nothing at all otherwise.
fn progress_bar(rows: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} {human_pos} rows  {per_sec}  {elapsed}")
    {
        bar.set_style(style);
    }
    bar.set_position(rows);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Where the bytes of the export go: decoded into rows, and each whole row written to
/// `<out>.part` with its id noted.
struct Sink {
    format: FileFormat,
    file: BufWriter<File>,
    ledger: Ledger,
    ledger_path: PathBuf,
    id_column: &'static str,
    bar: ProgressBar,
    /// Bytes of `<out>.part` written, whole rows or not yet synced.
    written: u64,
    last_checkpoint: Instant,
    decoder: StreamDecoder,
    /// The writer of the Arrow stream, once the schema has arrived, and the columns it keeps.
    writer: Option<(StreamWriter<Vec<u8>>, Vec<usize>)>,
    /// NDJSON: a line not yet ended. Arrow: the body's last 8 bytes, to see its end marker.
    tail: Vec<u8>,
}

impl Sink {
    fn new(
        format: FileFormat,
        file: File,
        ledger: Ledger,
        paths: &Paths,
        id_column: &'static str,
        bar: ProgressBar,
    ) -> Sink {
        Sink {
            format,
            file: BufWriter::with_capacity(1 << 20, file),
            written: ledger.bytes,
            ledger,
            ledger_path: paths.ledger.clone(),
            id_column,
            bar,
            last_checkpoint: Instant::now(),
            decoder: StreamDecoder::new(),
            writer: None,
            tail: Vec::new(),
        }
    }

    fn take(&mut self, chunk: Bytes) -> anyhow::Result<()> {
        match self.format {
            FileFormat::Ndjson => self.take_lines(&chunk)?,
            FileFormat::Arrows | FileFormat::Parquet => self.take_arrow(chunk)?,
        }
        if self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
            self.checkpoint()?;
        }
        Ok(())
    }

    fn take_arrow(&mut self, chunk: Bytes) -> anyhow::Result<()> {
        self.tail.extend_from_slice(&chunk);
        let keep_from = self.tail.len().saturating_sub(END_OF_STREAM.len());
        self.tail.drain(..keep_from);
        let mut buffer = Buffer::from(chunk);
        while !buffer.is_empty() {
            let batch = self
                .decoder
                .decode(&mut buffer)
                .context("reading the Arrow stream")?;
            if self.writer.is_none()
                && let Some(schema) = self.decoder.schema()
            {
                let keep: Vec<usize> = (0..schema.fields().len())
                    .filter(|&i| self.ledger.keep_id || schema.field(i).name() != self.id_column)
                    .collect();
                let mut writer = StreamWriter::try_new(Vec::new(), &schema.project(&keep)?)?;
                let head = std::mem::take(writer.get_mut());
                // A resumed file begins with the schema already.
                if self.written == 0 {
                    self.write(&head)?;
                }
                self.writer = Some((writer, keep));
            }
            if let Some(batch) = batch {
                self.take_batch(&batch)?;
            }
        }
        Ok(())
    }

    fn take_batch(&mut self, batch: &RecordBatch) -> anyhow::Result<()> {
        let Some((writer, keep)) = self.writer.as_mut() else {
            bail!("the Arrow stream sent rows before its schema");
        };
        let last_id = batch
            .column_by_name(self.id_column)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .filter(|ids| !ids.is_empty())
            .map(|ids| ids.value(ids.len() - 1).to_owned());
        writer.write(&batch.project(keep)?)?;
        let encoded = std::mem::take(writer.get_mut());
        self.write(&encoded)?;
        if let Some(id) = last_id {
            self.ledger.after = Some(id);
        }
        self.counted(batch.num_rows() as u64);
        Ok(())
    }

    fn take_lines(&mut self, chunk: &[u8]) -> anyhow::Result<()> {
        self.tail.extend_from_slice(chunk);
        let mut start = 0;
        let mut rows = 0;
        while let Some(end) = self.tail[start..].iter().position(|&b| b == b'\n') {
            let line = &self.tail[start..start + end];
            start += end + 1;
            let mut row: serde_json::Map<String, Value> =
                serde_json::from_slice(line).context("reading an NDJSON line")?;
            let id = match row.get(self.id_column) {
                Some(Value::String(id)) => id.clone(),
                _ => bail!("an NDJSON row has no {}", self.id_column),
            };
            if self.ledger.keep_id {
                let line = line.to_vec();
                self.write(&line)?;
            } else {
                row.remove(self.id_column);
                let line = serde_json::to_vec(&row)?;
                self.write(&line)?;
            }
            self.write(b"\n")?;
            self.ledger.after = Some(id);
            rows += 1;
        }
        self.tail.drain(..start);
        self.counted(rows);
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.file.write_all(bytes).context("writing the export")?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn counted(&mut self, rows: u64) {
        self.ledger.rows += rows;
        self.bar.inc(rows);
    }

    /// Makes the rows written so far durable, then the ledger that counts them: a crash
    /// between the two leaves bytes past the ledger's length, which a resume cuts off.
    fn checkpoint(&mut self) -> anyhow::Result<()> {
        self.file.flush().context("writing the export")?;
        self.file
            .get_ref()
            .sync_data()
            .context("syncing the export")?;
        self.ledger.bytes = self.written;
        let staged = self.ledger_path.with_extension("json.new");
        let ledger = serde_json::to_vec_pretty(&self.ledger)?;
        // A stale staging file (a crash between writing and renaming it) is removed, a symbolic
        // link as a link: never written through.
        let _ = std::fs::remove_file(&staged);
        create_private(&staged)
            .and_then(|mut file| {
                file.write_all(&ledger)?;
                file.sync_all()
            })
            .and_then(|()| std::fs::rename(&staged, &self.ledger_path))
            .with_context(|| format!("writing {}", self.ledger_path.display()))?;
        self.last_checkpoint = Instant::now();
        Ok(())
    }

    /// The body ended: the file completed (the Arrow stream's end, or the Parquet file written
    /// from it) and renamed into place. The body must have ended as the service ends it.
    fn finish(mut self, paths: &Paths) -> anyhow::Result<u64> {
        let cut =
            || anyhow!("the export ended early; run the same command with --resume to continue it");
        match self.format {
            FileFormat::Ndjson => {
                if !self.tail.is_empty() {
                    self.checkpoint()?;
                    return Err(cut());
                }
            }
            FileFormat::Arrows | FileFormat::Parquet => {
                if self.decoder.finish().is_err() || self.tail != END_OF_STREAM {
                    self.checkpoint()?;
                    return Err(cut());
                }
                let Some((mut writer, _)) = self.writer.take() else {
                    return Err(cut());
                };
                writer.finish()?;
                let end = std::mem::take(writer.get_mut());
                self.write(&end)?;
            }
        }
        self.checkpoint()?;
        if self.format == FileFormat::Parquet {
            let staged = paths.out.with_extension("parquet.new");
            to_parquet(&paths.part, &staged)?;
            std::fs::rename(&staged, &paths.out)?;
            std::fs::remove_file(&paths.part)?;
        } else {
            std::fs::rename(&paths.part, &paths.out)
                .with_context(|| format!("writing {}", paths.out.display()))?;
        }
        std::fs::remove_file(&paths.ledger)?;
        Ok(self.ledger.rows)
    }
}

/// The finished Arrow stream rewritten as a zstd-compressed Parquet file, a batch at a time.
fn to_parquet(stream: &Path, out: &Path) -> anyhow::Result<()> {
    let reader = StreamReader::try_new(BufReader::new(File::open(stream)?), None)
        .context("reading the downloaded rows")?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build();
    let _ = std::fs::remove_file(out);
    let file = create_private(out).with_context(|| format!("creating {}", out.display()))?;
    let mut writer = ArrowWriter::try_new(file, reader.schema(), Some(properties))?;
    for batch in reader {
        writer.write(&batch?)?;
    }
    // Flushes the last row group and writes the footer.
    writer.into_inner()?.sync_all()?;
    Ok(())
}
