"""user_sim: a support assistant with tools, a customer with a hidden goal, a reward read from the world."""
