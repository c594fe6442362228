# Stand-in for python:3.11-slim-bookworm where no image registry is reachable: Debian bookworm's
# Python 3.11 (a root file system made by debootstrap and imported, standins.py) with a
# virtualenv at /usr/local, so `python` and `pip` are where the official image has them. The
# machine's own CA certificates (ca/) are added, for a network that reaches PyPI through a proxy.
ARG BOOKWORM=hastream-standin/bookworm
FROM ${BOOKWORM}
COPY ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates \
 && python3 -m venv /usr/local \
 && /usr/local/bin/python -m pip --version
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
CMD ["python3"]
