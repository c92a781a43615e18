//! The SQL side of [`crate::core::pack`]: the `unpack(x)` function registered on every
//! connection (the `message_rows` view applies it) and the direct column read of hot paths.

use rusqlite::functions::FunctionFlags;
use rusqlite::types::{Value, ValueRef};
use rusqlite::Connection;

use crate::core::pack::unpack;

/// The text of a stored `text` column value read directly (hot paths skip the SQL function
/// and its copies): TEXT as is, a BLOB frame decompressed.
pub fn column_text(v: ValueRef<'_>) -> Result<String, String> {
    match v {
        ValueRef::Text(t) => std::str::from_utf8(t)
            .map(str::to_owned)
            .map_err(|e| format!("stored text is not UTF-8: {e}")),
        ValueRef::Blob(b) => unpack(b),
        ValueRef::Null => Ok(String::new()),
        other => Err(format!("stored text has type {:?}", other.data_type())),
    }
}

/// Registers `unpack(x)` on `conn`: BLOB frames become TEXT, everything else passes through.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "unpack",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| match ctx.get_raw(0) {
            ValueRef::Blob(b) => unpack(b)
                .map(Value::Text)
                .map_err(|e| rusqlite::Error::UserFunctionError(e.into())),
            ValueRef::Text(t) => Ok(Value::Text(String::from_utf8_lossy(t).into_owned())),
            ValueRef::Null => Ok(Value::Null),
            ValueRef::Integer(i) => Ok(Value::Integer(i)),
            ValueRef::Real(r) => Ok(Value::Real(r)),
        },
    )
}
