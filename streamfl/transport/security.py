"""The broker's authentication and encryption settings, passed to every Kafka client of every role.

A deployment that restricts who may write to a run's topics (SASL
authentication, TLS, ACLs on topics, the workers' consumer group and their
transactional ids) gives each role its credentials through environment
variables; every producer, consumer and admin client that streamfl creates
passes them to kafka-python unchanged. Child processes of ``streamfl run``
inherit them, so one setting covers a whole run.

=====================================  ==============================  =====================
environment variable                   kafka-python option             example
=====================================  ==============================  =====================
``STREAMFL_KAFKA_SECURITY_PROTOCOL``   ``security_protocol``           ``SASL_SSL``
``STREAMFL_KAFKA_SASL_MECHANISM``      ``sasl_mechanism``              ``SCRAM-SHA-512``
``STREAMFL_KAFKA_SASL_USERNAME``       ``sasl_plain_username``         ``worker``
``STREAMFL_KAFKA_SASL_PASSWORD``       ``sasl_plain_password``
``STREAMFL_KAFKA_SSL_CAFILE``          ``ssl_cafile``                  ``/etc/kafka/ca.pem``
``STREAMFL_KAFKA_SSL_CERTFILE``        ``ssl_certfile``                (mutual TLS)
``STREAMFL_KAFKA_SSL_KEYFILE``         ``ssl_keyfile``                 (mutual TLS)
``STREAMFL_KAFKA_SSL_PASSWORD``        ``ssl_password``                (of the key file)
``STREAMFL_KAFKA_SSL_CHECK_HOSTNAME``  ``ssl_check_hostname``          ``true`` / ``false``
=====================================  ==============================  =====================

Passwords therefore never appear on a command line (``ps`` shows those).
``compose/README.md`` shows a SASL_SSL deployment.
"""

from __future__ import annotations

import os

__all__ = ["ENV", "SecurityError", "client_config"]

ENV = {
    "STREAMFL_KAFKA_SECURITY_PROTOCOL": "security_protocol",
    "STREAMFL_KAFKA_SASL_MECHANISM": "sasl_mechanism",
    "STREAMFL_KAFKA_SASL_USERNAME": "sasl_plain_username",
    "STREAMFL_KAFKA_SASL_PASSWORD": "sasl_plain_password",
    "STREAMFL_KAFKA_SSL_CAFILE": "ssl_cafile",
    "STREAMFL_KAFKA_SSL_CERTFILE": "ssl_certfile",
    "STREAMFL_KAFKA_SSL_KEYFILE": "ssl_keyfile",
    "STREAMFL_KAFKA_SSL_PASSWORD": "ssl_password",
    "STREAMFL_KAFKA_SSL_CHECK_HOSTNAME": "ssl_check_hostname",
}
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")


class SecurityError(ValueError):
    """A security setting is invalid; one line naming the variable, the value and the allowed values."""


def client_config(environ=None) -> dict:
    """kafka-python keyword arguments for the security settings in the environment (see the module table).

    Parameters
    ----------
    environ : mapping or None
        Default ``os.environ``.

    Returns
    -------
    dict
        Only the options that are set; ``{}`` for a plain-text broker.

    Raises
    ------
    SecurityError
        An unknown protocol or mechanism, a SASL mechanism without a SASL
        protocol, or a TLS file that does not exist.

    Examples
    --------
    >>> client_config({"STREAMFL_KAFKA_SECURITY_PROTOCOL": "sasl_plaintext", "STREAMFL_KAFKA_SASL_MECHANISM": "PLAIN",
    ...                "STREAMFL_KAFKA_SASL_USERNAME": "w", "STREAMFL_KAFKA_SASL_PASSWORD": "s"})
    {'security_protocol': 'SASL_PLAINTEXT', 'sasl_mechanism': 'PLAIN', 'sasl_plain_username': 'w', 'sasl_plain_password': 's'}
    >>> client_config({})
    {}
    """
    env = os.environ if environ is None else environ
    out = {}
    for var, option in ENV.items():
        value = env.get(var)
        if value is None or value == "":
            continue
        if option == "security_protocol":
            value = value.upper()
            if value not in PROTOCOLS:
                raise SecurityError(f"{var}={value!r} is not a Kafka security protocol; use one of {', '.join(PROTOCOLS)}")
        elif option == "sasl_mechanism":
            value = value.upper()
            if value not in MECHANISMS:
                raise SecurityError(f"{var}={value!r} is not a SASL mechanism; use one of {', '.join(MECHANISMS)}")
        elif option == "ssl_check_hostname":
            if value.lower() not in ("true", "false", "1", "0"):
                raise SecurityError(f"{var}={value!r}; use true or false")
            value = value.lower() in ("true", "1")
        elif option in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") and not os.path.isfile(value):
            raise SecurityError(f"{var}={value!r}: no such file")
        out[option] = value
    if "sasl_mechanism" in out and not out.get("security_protocol", "").startswith("SASL_"):
        raise SecurityError(f"STREAMFL_KAFKA_SASL_MECHANISM is set but STREAMFL_KAFKA_SECURITY_PROTOCOL is "
                            f"{out.get('security_protocol', 'unset (PLAINTEXT)')}; use SASL_PLAINTEXT or SASL_SSL")
    return out

