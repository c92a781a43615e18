//! Checks of request fields that more than one API makes (the chat endpoint, the engine API,
//! recall), written once so that every route refuses a value with the same words, and kept out
//! of the handlers so that no handler imports another for them.

use crate::api_error::ApiError;

/// Longest session key accepted.
const MAX_SESSION_KEY: usize = 512;

/// Every session key the gateway takes (the chat header, the engine API's `sessionKey` and
/// `sessionId`) is at most [`MAX_SESSION_KEY`] bytes without control characters: a key is
/// stored, listed by `/v1/sessions` and written to logs; `param` names where it came from.
pub(crate) fn check_session_key(param: &str, key: &str) -> Result<(), ApiError> {
    if key.len() > MAX_SESSION_KEY || key.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            param,
            format!(
                "`{param}`: a session key is at most {MAX_SESSION_KEY} bytes without control characters; found {} bytes{}",
                key.len(),
                if key.chars().any(char::is_control) { " with control characters" } else { "" }
            ),
        ));
    }
    Ok(())
}
