//! The backends' own tracing spans, printed on standard error as they close (busy and idle
//! time of each stage): how the GPU benchmarks profile one call without a timing harness of
//! their own.

/// Runs `f` with every span and event down to DEBUG printed as it closes.
pub fn printed<R>(f: impl FnOnce() -> R) -> R {
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .with_writer(std::io::stderr)
        .finish();
    tracing::subscriber::with_default(subscriber, f)
}
