# etcd for the compose stack's etcd profile (compose.etcd.yaml), built offline: the `etcd`
# binary of Debian's etcd-server package (a static Go binary; deploy/build-images.sh copies
# it from the build machine) on the project's debootstrapped base. Runs as a non-root user.
ARG BASE=payouts/base:bookworm
FROM ${BASE}
RUN useradd --system --uid 10002 --no-create-home etcd \
 && mkdir -p /var/lib/etcd && chown etcd /var/lib/etcd && chmod 700 /var/lib/etcd
COPY target/docker-bin/etcd /usr/local/bin/etcd
USER 10002
EXPOSE 2379 2380
HEALTHCHECK --interval=2s --timeout=2s --retries=30 CMD curl -fsS http://127.0.0.1:2379/health || exit 1
ENTRYPOINT ["/usr/local/bin/etcd"]
