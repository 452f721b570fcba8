//! The book's generated tables (the options, the metrics), as their
//! staleness tests read them: the text between a page's markers.

/// The text of `page` between the line that starts with `start` and the
/// `<!-- end of the generated table -->` marker.
pub fn between_markers<'a>(page: &'a str, start: &str) -> &'a str {
    let end = "<!-- end of the generated table -->";
    let from = page
        .find(start)
        .expect("the generated table's start marker");
    let from = from + page[from..].find('\n').expect("a line") + 1;
    let to = page.find(end).expect("the generated table's end marker");
    page[from..to].trim_end()
}
