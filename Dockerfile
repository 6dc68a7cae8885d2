# The idemgate image for users whose Docker can pull: a normal multi-stage
# Rust build. (Without a registry, scripts/idemgate-image.sh builds an
# equivalent image from a local `cargo build --release`.)
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY lua lua
RUN cargo build --release --locked --bin idemgate

FROM debian:bookworm-slim
COPY --from=build /src/target/release/idemgate /usr/local/bin/idemgate
# The system roots for rediss:// URLs without --redis-tls-ca (the slim image has none).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["idemgate"]
CMD ["serve"]
