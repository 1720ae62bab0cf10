use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use quarry_store::StoreError;

/// Longest error message sent back; longer ones (quoting a huge path, say) are cut.
const MAX_MESSAGE_BYTES: usize = 4096;

/// Every way a request can fail. Client errors say what is wrong; server errors are logged
/// in full and answered briefly.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    /// A private store's read without valid credentials: 401 with a Basic challenge, so pip,
    /// apt and browsers ask for (or send) the token.
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("none of the media types in Accept can be served; try application/vnd.pypi.simple.v1+json or text/html")]
    NotAcceptable,
    #[error("range not satisfiable")]
    RangeNotSatisfiable(u64),
    #[error("{0}")]
    Internal(String),
    /// The server cannot answer now (it is stopping): 503.
    #[error("{0}")]
    Unavailable(String),
}

impl From<quarry_store::KeyError> for AppError {
    fn from(e: quarry_store::KeyError) -> Self {
        Self::BadRequest(e.to_string())
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(key) => Self::NotFound(format!("not found: /{key}")),
            StoreError::InvalidKey(e) => Self::BadRequest(e.to_string()),
            StoreError::TooLarge { .. } => Self::TooLarge(e.to_string()),
            StoreError::DigestMismatch { .. } | StoreError::Body { .. } => Self::BadRequest(e.to_string()),
            StoreError::Conflict { .. } | StoreError::Collision { .. } => Self::Conflict(e.to_string()),
            StoreError::RangeNotSatisfiable { size, .. } => Self::RangeNotSatisfiable(size),
            StoreError::Io { .. } | StoreError::Backend(_) => Self::Internal(e.to_string()),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = match &self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) | Self::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            Self::RangeNotSatisfiable(_) => StatusCode::RANGE_NOT_SATISFIABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        let body = if let Self::Internal(detail) = &self {
            tracing::error!(%detail, "request failed");
            "error: internal server error (details are in the server log)\n".to_owned()
        } else {
            // Messages quote the input; a huge input is quoted in part.
            format!("error: {}\n", crate::truncated(&self.to_string(), MAX_MESSAGE_BYTES))
        };
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        match self {
            Self::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"quarry\""));
            }
            Self::Unauthenticated(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"quarry\""));
            }
            Self::RangeNotSatisfiable(size) => {
                if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                    headers.insert(header::CONTENT_RANGE, v);
                }
            }
            _ => {}
        }
        response
    }
}
