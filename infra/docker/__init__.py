"""Docker for the image and compose tests: the engine (engine.sh), and stand-ins for the images
docker-compose.yml takes from a registry, on machines that reach none (standins.py)."""
