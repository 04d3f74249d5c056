"""Kafka consumers of streamfl: FedSEA workers, the aggregator and the regret tracker."""
