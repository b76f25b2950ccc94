//! The one error the configuration has. A leaf of its own so that every concern's parser can
//! return it without importing the module that assembles them (`config::mod`).

use std::fmt;

/// A configuration problem, always about one named field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "invalid configuration: {}", self.problem)
        } else {
            write!(
                f,
                "invalid configuration field `{}`: {}",
                self.field, self.problem
            )
        }
    }
}

impl std::error::Error for ConfigError {}

pub(super) fn field_error(field: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.to_string(),
        problem: problem.into(),
    }
}
