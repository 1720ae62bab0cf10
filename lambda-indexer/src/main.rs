//! `quarry-lambda-indexer`: the S3-event Lambda that runs Quarry's indexer on an S3 store.
//!
//! The S3 store backend and the event handling arrive together; until then this binary only
//! explains itself, so that deploying it by mistake fails loudly rather than silently.

fn main() -> anyhow::Result<()> {
    anyhow::bail!(
        "quarry-lambda-indexer needs the S3 store backend, which this build does not include yet; \
         run `quarry index <store>` or `quarry serve` instead"
    )
}
