# syntax=docker/dockerfile:1
# tokengate: multi-stage build. The runtime image holds production dependencies, the compiled
# JavaScript and the shipped configs, and runs as the unprivileged `node` user.
#
#   docker build -t tokengate .
#   docker run --rm -p 8080:8080 \
#     -v "$PWD/config/tokengate.redis.yaml:/etc/tokengate/tokengate.yaml:ro" \
#     -e REDIS_URL=redis://redis:6379 -e TOKENGATE_ADMIN_TOKEN=... tokengate
#
# Secrets (admin token, token tag key, Redis password) come from the environment and are
# substituted into the config at start; none is baked into the image.

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

FROM ${NODE_IMAGE} AS production-dependencies
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force

FROM ${NODE_IMAGE}
ENV NODE_ENV=production \
    TOKENGATE_CONFIG=/etc/tokengate/tokengate.yaml \
    TOKENGATE_HOST=0.0.0.0 \
    TOKENGATE_PORT=8080 \
    TOKENGATE_ADMIN_PORT=9090
WORKDIR /app
COPY --from=production-dependencies --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
COPY --chown=root:root package.json ./
COPY --chown=root:root config ./config
# The default config, replaced by mounting a file over it.
COPY --chown=root:root config/tokengate.yaml /etc/tokengate/tokengate.yaml
USER node
# Public listener (issuer + gateway). The ops listener (9090) binds to loopback by default:
# expose it only with admin.host set and admin.token given.
EXPOSE 8080
STOPSIGNAL SIGTERM
# Runs inside the container, so the loopback-bound ops listener answers it.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.TOKENGATE_ADMIN_PORT || 9090) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/main.js"]
CMD ["serve"]
