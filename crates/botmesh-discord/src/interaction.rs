//! Answering the interactions Discord waits for (within 3 s): a button press with a deferred
//! update, a slash command with a message only its user sees.

use std::sync::Arc;

use serenity::builder::{CreateInteractionResponse, CreateInteractionResponseMessage};

use crate::inbound::Ack;
use crate::state::Inner;

/// Answers an interaction Discord waits for.
pub(crate) async fn acknowledge(inner: Arc<Inner>, ack: Ack) {
    let (id, token, response) = match ack {
        Ack::Component { id, token } => (id, token, CreateInteractionResponse::Acknowledge),
        Ack::Command { id, token, text } => {
            let message = CreateInteractionResponseMessage::new().content(text).ephemeral(true);
            (id, token, CreateInteractionResponse::Message(message))
        }
    };
    let answered = inner.http.create_interaction_response(id, &token, &response, Vec::new()).await;
    if let Err(e) = answered {
        if crate::errors::is_unauthorized(&e) {
            inner.token_refused("an interaction callback");
        }
        tracing::debug!(target: "botmesh", provider = inner.id(), error = %e, "acknowledging an interaction failed");
    }
}
