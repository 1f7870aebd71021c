//! Where the binary's log lines and traces go: stderr as text or JSON, and — when `[telemetry]
//! otlp_endpoint` is set — spans exported over OTLP (HTTP, JSON) to a collector.

use anyhow::{Context, Result};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// For people.
    Text,
    /// One JSON object per line, with the current span.
    Json,
}

/// The installed exporter, flushed when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            // Spans still buffered go out before the process ends.
            let _ = p.shutdown();
        }
    }
}

/// Installs the subscriber: `default_level` unless `RUST_LOG` says otherwise, lines on stderr in
/// `format`, and spans to `otlp_endpoint` (a collector's base URL; `/v1/traces` is appended).
pub fn init(
    format: LogFormat,
    default_level: &str,
    otlp_endpoint: Option<&str>,
) -> Result<Telemetry> {
    // A running task has a span held for its whole run, for the exporter, and one made each time it
    // is polled, for the log lines (see `mcp_tasks_engine::trace`): each side is kept from the other,
    // so logging alone keeps nothing per waiting task.
    let filter = |off: &str| -> Result<EnvFilter> {
        let f = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
        Ok(f.add_directive(
            format!("{off}=off")
                .parse()
                .with_context(|| format!("filter directive for {off}"))?,
        ))
    };
    let lines_filter = filter(mcp_tasks_engine::trace::RUN_SPAN_TARGET)?;
    // Colours only for a person at a terminal: a file or a pipe (`serve 2> log`) gets plain text,
    // and `NO_COLOR` (https://no-color.org) turns them off anywhere.
    let colour = {
        use std::io::IsTerminal;
        std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
    };
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => lines.boxed(),
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    };
    let (spans, provider) = match otlp_endpoint {
        Some(base) => {
            let url = format!("{}/v1/traces", base.trim_end_matches('/'));
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpJson)
                .with_endpoint(url.clone())
                .build()
                .with_context(|| format!("cannot set up the OTLP exporter for {url}"))?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(Resource::builder().with_service_name("mcp-tasks").build())
                .build();
            let tracer = provider.tracer("mcp-tasks");
            (
                Some(
                    tracing_opentelemetry::layer()
                        .with_tracer(tracer)
                        .with_filter(filter(mcp_tasks_engine::trace::POLL_SPAN_TARGET)?),
                ),
                Some(provider),
            )
        }
        None => (None, None),
    };
    let logging = tracing_subscriber::registry().with(lines.with_filter(lines_filter));
    // Not `.with(Option<Layer>)`: an absent layer answers that it wants every span, which could
    // keep the span held per running task for nobody.
    match spans {
        Some(spans) => logging.with(spans).init(),
        None => logging.init(),
    }
    Ok(Telemetry { provider })
}
