"""The trainer family: VAE training methods (vae, hvi, rmhvi, dppvae)."""
