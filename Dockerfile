# syntax=docker/dockerfile:1
# Build: a static binary with everything (templates, static files, skills,
# migrations) embedded.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/pizza-bot .

# Run: a small image as an unprivileged user. The database is external
# (DATABASE_URL); the data root holds skills, .mcp.json and files.
FROM debian:bookworm-slim
# WITH_NODE=true adds Node.js and npm (npx) for stdio MCP servers started
# with npx ("command": "npx" in .mcp.json): docker compose build --build-arg
# WITH_NODE=true, or PIZZA_WITH_NODE=true in .env. Other runtimes (uvx,
# python3) go in an image built FROM this one.
ARG WITH_NODE=false
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tzdata \
    && if [ "$WITH_NODE" = "true" ]; then apt-get install -y --no-install-recommends nodejs npm; fi \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /data --create-home pizza
COPY --from=build /out/pizza-bot /usr/local/bin/pizza-bot
USER 10001:10001
ENV PIZZA_DATA_ROOT=/data
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD ["pizza-bot", "healthcheck"]
ENTRYPOINT ["pizza-bot"]
CMD ["serve"]
