//! `--device`: which devices a command computes on (`hetsparse::DeviceChoice`).

use hetsparse::{Context, DeviceChoice, Error};

use crate::error::CliError;

/// The context computing on `choice`.
pub fn context(choice: &DeviceChoice) -> Result<Context<f64>, CliError> {
    Context::on(choice).map_err(|e| CliError::Device {
        device: choice.to_string(),
        reason: match e {
            Error::NoDevice { reason, .. } => reason,
            other => other.to_string(),
        },
    })
}
