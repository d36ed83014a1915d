# Prometheus for the compose stack, built offline: the `prometheus` binary of Debian's
# prometheus package (2.42; a Go binary linked only against glibc >= 2.34, which the bookworm
# base has) and its web UI assets (/usr/share/prometheus/web, which Debian's build reads from
# disk: without them the UI answers 500, the API and /-/ready still work), both copied from
# the build machine by deploy/build-images.sh into target/docker-bin/ (the assets as a tar,
# since deploy/Dockerfile copies target/docker-bin/* as plain files), on the project's
# debootstrapped base. Scrape config and alert rules come from deploy/prometheus/
# (prometheus.yml, alerts.yml; tested by promtool). Runs as a non-root user.
ARG BASE=payouts/base:bookworm
FROM ${BASE}
RUN useradd --system --uid 10003 --no-create-home prometheus \
 && mkdir -p /etc/prometheus /prometheus /usr/share/prometheus \
 && chown prometheus /prometheus && chmod 700 /prometheus
COPY target/docker-bin/prometheus /usr/local/bin/prometheus
ADD target/docker-bin/prometheus-web.tar /usr/share/prometheus/
COPY deploy/prometheus/prometheus.yml /etc/prometheus/prometheus.yml
COPY deploy/prometheus/alerts.yml /etc/prometheus/alerts.yml
USER 10003
EXPOSE 9090
HEALTHCHECK --interval=2s --timeout=2s --retries=30 CMD curl -fsS http://127.0.0.1:9090/-/ready || exit 1
ENTRYPOINT ["/usr/local/bin/prometheus", \
            "--config.file=/etc/prometheus/prometheus.yml", \
            "--storage.tsdb.path=/prometheus", \
            "--web.listen-address=0.0.0.0:9090"]
