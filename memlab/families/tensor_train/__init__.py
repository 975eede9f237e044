"""The tensor_train family: a TT linear layer against the dense layer it factorizes."""
