//! Media and the business's own objects: `GET /{id}` (a media id's metadata, or the phone
//! number, page, Instagram account or WhatsApp Business Account), the download behind a
//! media id's `url` (which wants the token), the public URL of a Messenger or Instagram
//! attachment, and WhatsApp uploads (`POST /{phone_number_id}/media`).

use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::faults::GraphError;
use super::state::Shared;

/// The largest body a call may carry: WhatsApp takes documents up to 100 MB; a stand-in for
/// tests needs less.
pub(super) const MAX_BODY: usize = 20 * 1024 * 1024;

/// `GET /{id}`: the business's objects by their ids (`me` is the page), or a media id's
/// `{"url", "mime_type", "sha256", "file_size", "id", "messaging_product"}`.
pub(super) fn object(shared: &Shared, id: &str) -> Result<Value, GraphError> {
    let c = &shared.config;
    if id == c.phone_number_id {
        return Ok(json!({
            "id": c.phone_number_id,
            "display_phone_number": c.display_phone_number,
            "verified_name": "botmesh test",
            "quality_rating": "GREEN",
            "code_verification_status": "VERIFIED",
        }));
    }
    if id == c.page_id || id == "me" {
        return Ok(json!({ "id": c.page_id, "name": "botmesh test page" }));
    }
    if id == c.instagram_id {
        return Ok(json!({ "id": c.instagram_id, "username": "botmesh_test" }));
    }
    if id == c.waba_id {
        return Ok(json!({ "id": c.waba_id, "name": "botmesh test business" }));
    }
    let inner = shared.lock();
    let media = inner.media.get(id).ok_or_else(|| GraphError::unknown_object(id, "get"))?;
    Ok(json!({
        "url": format!("{}/media-download/{id}", shared.base_url),
        "mime_type": media.mime_type,
        "sha256": media.sha256,
        "file_size": media.bytes.len(),
        "id": id,
        "messaging_product": "whatsapp",
    }))
}

/// The bytes of a media id, with its MIME type: `GET /media-download/{id}` (behind the token)
/// and `GET /cdn/{id}` (public, as Messenger's attachment URLs are).
pub(super) fn bytes(shared: &Shared, id: &str) -> Result<Response, GraphError> {
    let inner = shared.lock();
    let media = inner.media.get(id).ok_or_else(GraphError::media_not_found)?;
    Ok(([(CONTENT_TYPE, media.mime_type.clone())], media.bytes.clone()).into_response())
}

/// `POST /{phone_number_id}/media`: a `multipart/form-data` upload with `messaging_product`
/// (`whatsapp`), `file` and `type` (the MIME type; else the file part's content type).
/// Answers `{"id": <media id>}`.
pub(super) async fn upload(
    shared: &Shared,
    node: &str,
    request: Request,
) -> Result<Value, GraphError> {
    if node != shared.config.phone_number_id {
        return Err(GraphError::unknown_object(node, "post"));
    }
    let mut multipart = Multipart::from_request(request, &())
        .await
        .map_err(|e| GraphError::invalid_parameter(format!("expected multipart/form-data: {e}")))?;
    let (mut product, mut mime, mut file) = (None, None, None);
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| GraphError::invalid_parameter(format!("malformed multipart body: {e}")))?
    {
        let name = field.name().unwrap_or_default().to_owned();
        let part_type = field.content_type().map(str::to_owned);
        let bytes = field
            .bytes()
            .await
            .map_err(|e| GraphError::invalid_parameter(format!("malformed part: {e}")))?;
        match name.as_str() {
            "messaging_product" => product = Some(String::from_utf8_lossy(&bytes).into_owned()),
            "type" => mime = Some(String::from_utf8_lossy(&bytes).into_owned()),
            "file" => file = Some((bytes.to_vec(), part_type)),
            _ => {}
        }
    }
    if product.as_deref() != Some("whatsapp") {
        return Err(GraphError::invalid_parameter("The parameter messaging_product is required."));
    }
    let Some((bytes, part_type)) = file else {
        return Err(GraphError::invalid_parameter("The parameter file is required."));
    };
    let mime = mime.or(part_type).unwrap_or_else(|| "application/octet-stream".to_owned());
    let id = shared.update(|inner| inner.store_media(bytes, &mime));
    Ok(json!({ "id": id }))
}
