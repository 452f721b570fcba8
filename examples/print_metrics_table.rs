//! Prints the book's metrics table (docs/src/metrics.md, between its
//! markers): every series `/metrics` can show.

fn main() {
    print!("{}", corecast::metrics_markdown_table());
}
