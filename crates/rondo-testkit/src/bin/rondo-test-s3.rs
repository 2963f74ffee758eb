//! `rondo-test-s3 DIR [--listen ADDR] [--access-key-id ID]
//! [--secret-access-key KEY] [--bucket NAME]`: a real S3 server (s3s-fs)
//! over DIR for manual runs and demos of rondo's S3 tier, signature
//! checking on. It makes the bucket (a directory of DIR; `rondo-test` by
//! default), prints `listening: http://ADDR` on stdout and serves until
//! killed. Defaults: 127.0.0.1 and a free port, the test key pair of
//! `rondo_testkit::s3`. The tests themselves run the same server in
//! process (`rondo_testkit::s3::S3Server`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use rondo_testkit::s3::{TEST_ACCESS_KEY_ID, TEST_BUCKET, TEST_SECRET_ACCESS_KEY, serve};

const USAGE: &str = "usage: rondo-test-s3 DIR [--listen ADDR] [--access-key-id ID] \
                     [--secret-access-key KEY] [--bucket NAME]";

struct Options {
    root: PathBuf,
    listen: String,
    access_key_id: String,
    secret_access_key: String,
    bucket: String,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut root = None;
    let mut options = Options {
        root: PathBuf::new(),
        listen: "127.0.0.1:0".into(),
        access_key_id: TEST_ACCESS_KEY_ID.into(),
        secret_access_key: TEST_SECRET_ACCESS_KEY.into(),
        bucket: TEST_BUCKET.into(),
    };
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--listen" => &mut options.listen,
            "--access-key-id" => &mut options.access_key_id,
            "--secret-access-key" => &mut options.secret_access_key,
            "--bucket" => &mut options.bucket,
            "-h" | "--help" => return Err(USAGE.into()),
            flag if flag.starts_with('-') => return Err(format!("unknown flag {flag}\n{USAGE}")),
            _ if root.is_none() => {
                root = Some(PathBuf::from(&arg));
                continue;
            }
            _ => return Err(format!("one directory only\n{USAGE}")),
        };
        *slot = args
            .next()
            .ok_or_else(|| format!("{arg} needs a value\n{USAGE}"))?;
    }
    options.root = root.ok_or_else(|| USAGE.to_string())?;
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let bucket_dir = options.root.join(&options.bucket);
    if let Err(e) = std::fs::create_dir_all(&bucket_dir) {
        eprintln!("rondo-test-s3: cannot make {}: {e}", bucket_dir.display());
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&options.listen).await?;
        let addr = listener.local_addr()?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening: http://{addr}")?;
        stdout.flush()?;
        serve(
            listener,
            &options.root,
            &options.access_key_id,
            &options.secret_access_key,
            std::future::pending(),
        )
        .await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rondo-test-s3: {e}");
            ExitCode::FAILURE
        }
    }
}
