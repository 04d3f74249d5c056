"""Kafka producers of streamfl (``python -m producers.stream_producer``)."""
