# PostgreSQL 15 on the offline Debian base (deploy/build-images.sh). Registry users take the
# official postgres:15 image instead (compose.registry.yaml); both create lockdb and paydb
# and take the superuser password from POSTGRES_PASSWORD.
ARG BASE=payouts/base:bookworm
FROM ${BASE}
RUN (test -x /usr/lib/postgresql/15/bin/postgres || (apt-get update && apt-get install -y --no-install-recommends postgresql-15 && rm -rf /var/lib/apt/lists/*)) \
 && mkdir -p /var/lib/postgresql/data /docker-entrypoint-initdb.d && chown -R postgres:postgres /var/lib/postgresql
COPY deploy/postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
COPY deploy/initdb/ /docker-entrypoint-initdb.d/
USER postgres
ENV PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:$PATH
EXPOSE 5432
HEALTHCHECK --interval=2s --timeout=2s --retries=30 CMD pg_isready -h 127.0.0.1 -U postgres -d paydb || exit 1
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
