fn main() {
    print!("{}", corecast::config::markdown_table());
}
