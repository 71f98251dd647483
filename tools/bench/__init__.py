"""Benchmarks of Siskin side by side with Mosquitto and amqtt (`python -m tools.bench`)."""
