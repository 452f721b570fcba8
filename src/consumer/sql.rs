//! The statements of a PostgreSQL consumer, for its table and dead-letter
//! table (identifiers checked by `ConsumerConfig`: plain names, safe
//! unquoted).

/// Claims up to `$1` rows, oldest first, skipping rows another consumer
/// holds (`FOR UPDATE SKIP LOCKED`): several instances share one table
/// without taking a row twice.
pub fn claim(table: &str) -> String {
    format!(
        "SELECT id, channel, data::text, tags::text FROM {table} \
         ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED"
    )
}

/// Deletes the rows whose ids are in `$1` (published or dead-lettered).
pub fn delete(table: &str) -> String {
    format!("DELETE FROM {table} WHERE id = ANY($1)")
}

/// Moves a poison row to the dead-letter table with the reason (its
/// columns are text: what was poison may not be valid JSON).
pub fn dead_letter(dead: &str) -> String {
    format!(
        "INSERT INTO {dead} (id, channel, data, tags, created_at, reason) \
         VALUES ($1::bigint, $2::text, $3::text, $4::text, now(), $5::text)"
    )
}

/// Checks at start that both tables exist with the columns used (fails
/// with PostgreSQL's own message otherwise).
pub fn probe(table: &str, dead: &str) -> [String; 2] {
    [
        format!("SELECT id, channel, data::text, tags::text, created_at FROM {table} LIMIT 0"),
        format!("SELECT id, channel, data, tags, created_at, reason FROM {dead} LIMIT 0"),
    ]
}

/// `LISTEN channel`.
pub fn listen(channel: &str) -> String {
    format!("LISTEN {channel}")
}
