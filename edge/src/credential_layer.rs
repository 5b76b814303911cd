//! The credential layer as a tower layer: a [`Guard`] given to `Router::layer` wraps each route
//! of its group in a [`Guarded`] service, which runs `crate::auth`'s checks and then the route,
//! with `crate::idempotency` between them when the group takes idempotent POSTs.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;

use crate::auth::{Guard, authenticate_then};
use crate::error::ApiError;

impl<S> tower_layer::Layer<S> for Guard {
    type Service = Guarded<S>;

    fn layer(&self, route: S) -> Guarded<S> {
        Guarded {
            armed: Some((self.clone(), route)),
        }
    }
}

/// A route behind the credential layer. axum clones a route for each request and calls the
/// clone once, so the call moves this service's guard and route into its future; cloning them
/// again there, as `axum::middleware::from_fn` does, would add an allocation and two more
/// writes to reference counts that every core shares (docs/performance.md#the-api).
#[derive(Clone)]
pub struct Guarded<S> {
    armed: Option<(Guard, S)>,
}

impl<S> tower_service::Service<Request> for Guarded<S>
where
    S: tower_service::Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let Some((guard, route)) = self.armed.take() else {
            // Not under axum, which calls each clone of a route once: were that to change, every
            // keyed request of the HTTP tests would read this 500.
            let e = ApiError::internal("routing a request", "a guarded route was called twice");
            return Box::pin(std::future::ready(Ok(e.into_response())));
        };
        let idempotent = guard.idempotent_posts;
        Box::pin(async move {
            let answer = |req, auth| async move {
                if idempotent {
                    crate::idempotency::idempotent_posts(auth, req, |req| call_route(route, req))
                        .await
                } else {
                    call_route(route, req).await
                }
            };
            Ok(authenticate_then(guard, req, answer).await)
        })
    }
}

async fn call_route<S>(mut route: S, req: Request) -> Response
where
    S: tower_service::Service<Request, Response = Response, Error = Infallible>,
{
    let Ok(()) = std::future::poll_fn(|cx| route.poll_ready(cx)).await;
    let Ok(response) = route.call(req).await;
    response
}
