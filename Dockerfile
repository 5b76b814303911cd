# The `vigil` image: one binary, every role (docs/operations.md#run-it-with-docker-compose).
# Dependencies are built in a layer of their own (cargo-chef), so a change to Vigil's sources
# rebuilds only Vigil; the runtime image holds the stripped binary and CA roots, nothing else.

FROM rust:1.95.0-bookworm AS chef
RUN cargo install --locked cargo-chef --version 0.1.78
WORKDIR /build

# The dependency graph alone, from the manifests and lockfile.
FROM chef AS planner
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
# rdkafka-sys builds librdkafka from source with make, a C compiler, and zlib's and OpenSSL's
# headers, which this image has.
COPY --from=planner /build/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json --bin vigil
COPY . .
RUN cargo build --release --locked --bin vigil \
    && objcopy --strip-debug target/release/vigil /build/vigil

FROM debian:bookworm-slim AS runtime
# CA roots for TLS to the engines and to webhook endpoints, and OpenSSL, which librdkafka's TLS
# to Kafka links; zlib is in the base image.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 vigil \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/vigil --create-home vigil
COPY --from=builder /build/vigil /usr/local/bin/vigil
# By number, so a runtime that checks for a non-root user needs no passwd file to tell.
USER 10001:10001
WORKDIR /var/lib/vigil
# Listen on every interface inside the container; keep the embedded engines' files in the
# volume. Both are `vigil serve`'s own variables, so a compose file or `docker run -e` overrides them.
ENV VIGIL_LISTEN=0.0.0.0:8080 \
    VIGIL_DATA_DIR=/var/lib/vigil
VOLUME ["/var/lib/vigil"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=6s --start-period=20s --retries=3 CMD ["vigil", "healthcheck"]
ENTRYPOINT ["vigil"]
CMD ["serve"]
