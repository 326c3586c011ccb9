//! `/providers` and `/models`: the provider-wide cooldowns (kept in the database), listed
//! without secrets and ended by an operator (`DELETE /providers/cooldowns` with `{key}`),
//! and the catalogue's models with their status.
use super::error::ApiJson;
use super::AppState;
use crate::clock::now_ms;
use crate::error::{Error, Kind, Result};
use app::wire::{ClearCooldown, ModelList, ProvidersResponse};
use axum::extract::State;
use axum::Json;

pub async fn list(State(state): State<AppState>) -> Result<Json<ProvidersResponse>> {
    Ok(Json(report(&state, now_ms()).await?))
}

/// Every cooldown in force and each model not `ok`.
async fn report(state: &AppState, now: i64) -> Result<ProvidersResponse> {
    Ok(ProvidersResponse {
        cooldowns: state.cooldowns.list(now).await,
        models: state.engine.model_health().await?,
    })
}

pub async fn models(State(state): State<AppState>) -> Result<Json<ModelList>> {
    Ok(Json(state.engine.models_now().await?))
}

/// Ends one cooldown; answers the ones still in force.
pub async fn clear(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<ClearCooldown>,
) -> Result<Json<ProvidersResponse>> {
    let now = now_ms();
    let cleared = state.cooldowns.clear(&body.key, now).await.ok_or_else(|| {
        Error::new(
            Kind::NotFound,
            format!(
                "no cooldown in force for {:?}: GET /api/v1/providers lists them",
                body.key
            ),
        )
    })?;
    tracing::info!(key = %cleared.key, until = cleared.until, "provider cooldown cleared by an operator");
    Ok(Json(report(&state, now).await?))
}
